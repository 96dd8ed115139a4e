package crash

import (
	"fmt"
	"os"
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bucketbroker-crash-")
	if err != nil {
		panic(err)
	}
	binary, err = harness.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stopClaimAPIServer()
	os.RemoveAll(dir)
	os.Exit(code)
}
