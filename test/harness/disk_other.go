//go:build !linux

package harness

import "testing"

// SmallDisk skips the test: a small disk is a tmpfs, mounted on Linux only.
func SmallDisk(t testing.TB, _ int) string {
	t.Helper()
	t.Skip("a small disk needs a tmpfs mount (Linux)")
	return ""
}

// FillDisk is never reached: SmallDisk skipped the test.
func FillDisk(t testing.TB, _ string) func() {
	t.Helper()
	t.Skip("a small disk needs a tmpfs mount (Linux)")
	return func() {}
}
