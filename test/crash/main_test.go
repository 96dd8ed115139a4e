package crash

import (
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

var binary string

func TestMain(m *testing.M) {
	harness.RunMain(m, stopClaimAPIServer, harness.Binary{Path: &binary, Build: harness.Build})
}
