//go:build synctests

package sim

// franz-go built with -tags synctests takes its locks through channels,
// which testing/synctest counts as durably blocked (see TestMain).
const kgoChannelMutexes = true
