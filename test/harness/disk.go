//go:build linux

package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallDisk mounts a file system of size bytes (a tmpfs) on a new folder
// and returns the folder: a disk a test can fill for real. It skips the
// test unless the process may mount (root), and unmounts when the test
// ends.
func SmallDisk(t testing.TB, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a small disk needs a tmpfs mount, which needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("mount a tmpfs for a small disk: %v", err)
	}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the small disk %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes a file into dir until the file system has no space
// left, and returns a function that removes it again.
func FillDisk(t testing.TB, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	defer f.Close()
	// Large writes, then ones of a page, so that no page is left over. The
	// file system is small: this ends.
	for _, n := range []int{1 << 16, 1 << 12, 1} {
		buf := make([]byte, n)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill the disk: %v", err)
				}
				break
			}
		}
	}
	return func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatalf("free the disk: %v", err)
		}
	}
}
