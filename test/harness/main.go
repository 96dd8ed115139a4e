package harness

import (
	"fmt"
	"os"
	"testing"
)

// Binary names a program a test package builds once: Build writes it into
// a folder and returns its path, which RunMain stores in *Path.
type Binary struct {
	Path  *string
	Build func(dir string) (string, error)
}

// RunMain is a test package's TestMain for tests that run real processes:
// it builds each binary (Build, BuildIllBroker) into one temporary folder,
// runs the tests, then cleanup (nil: none), removes the folder and exits
// with the tests' code. A failed build exits 1 with its error.
func RunMain(m *testing.M, cleanup func(), binaries ...Binary) {
	dir, err := os.MkdirTemp("", "bucketbroker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, b := range binaries {
		if *b.Path, err = b.Build(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
