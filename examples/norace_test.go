//go:build !race

package examples_test

const raceEnabled = false
