//go:build race

package examples_test

// raceEnabled tells whether the tests run with the race detector, so the
// plugin module's tests do too.
const raceEnabled = true
