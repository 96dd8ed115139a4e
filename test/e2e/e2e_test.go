package e2e

import (
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

const (
	serviceID = harness.ServiceID
	planStd   = harness.PlanStd
	user      = harness.User
	pass      = harness.Pass
)

var binary string

func TestMain(m *testing.M) {
	harness.RunMain(m, nil, harness.Binary{Path: &binary, Build: harness.Build})
}

func newBroker(t *testing.T) *harness.Broker { return harness.New(t, binary) }

// untilDone re-sends a request, as a platform does, until it gets one of
// the wanted codes.
func untilDone(t *testing.T, b *harness.Broker, method, path string, body any, want ...int) harness.Reply {
	t.Helper()
	r, err := b.Until(60*time.Second, method, path, body, want...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func buckets(t *testing.T, b *harness.Broker) []string {
	t.Helper()
	names, err := b.Backend.Buckets()
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func keys(t *testing.T, b *harness.Broker) map[string][]string {
	t.Helper()
	m, err := b.Backend.Keys()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
