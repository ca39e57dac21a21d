package config

import "testing"

// SetCgroupRoot points the check of the memory limit at a cgroup file
// system mounted at root until the test ends.
func SetCgroupRoot(t testing.TB, root string) {
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
}
