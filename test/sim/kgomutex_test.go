//go:build !synctests

package sim

// Without -tags synctests franz-go takes its locks through sync.Mutex
// (see TestMain).
const kgoChannelMutexes = false
