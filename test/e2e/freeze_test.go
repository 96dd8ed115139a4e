package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// frozenGuard is how long TestFrozenStore waits for an answer while the
// database is frozen before it thaws it and fails: a stop for a request
// that would otherwise hang for as long as the database stays frozen, not
// the bound the broker is held to (the store's 3s per call).
const frozenGuard = 30 * time.Second

// TestFrozenStore freezes the broker's PostgreSQL (SIGSTOP of every one of
// its processes: connections stay open, the kernel acknowledges what is
// sent, nothing answers, as in a network partition) under the real binary.
// Sync and async provisions, last_operation and /readyz are answered 503,
// while the database is still frozen, with a description; /readyz names
// the failed check ("store") and the log says why it failed; once the
// database is thawed the platform's retries succeed, and every instance
// has exactly one bucket.
func TestFrozenStore(t *testing.T) {
	pg := harness.NewPostgres(t)
	b := newBroker(t)
	b.Env = append(b.Env, "BUCKETBROKER_STORE="+pg.DSN)
	b.Start()
	async := "?accepts_incomplete=true"
	untilDone(t, b, "PUT", "/v2/service_instances/before", provisionBody, http.StatusCreated)
	op := untilDone(t, b, "PUT", "/v2/service_instances/async-before"+async, provisionBody, http.StatusAccepted).Operation()
	if r, err := b.LastOperation(time.Minute, "/v2/service_instances/async-before", op); err != nil || r.State() != "succeeded" {
		t.Fatalf("async provision before the freeze: %v %v", r, err)
	}

	pg.Freeze()
	for _, req := range []struct{ method, path string }{
		{"PUT", "/v2/service_instances/during"},
		{"PUT", "/v2/service_instances/during-async" + async},
		{"GET", "/v2/service_instances/async-before/last_operation?operation=" + op},
		{"PUT", "/v2/service_instances/before"},
		{"GET", "/readyz"},
	} {
		var body any
		if req.method == "PUT" {
			body = provisionBody
		}
		answer := make(chan harness.Reply, 1)
		go func() { answer <- b.Do(req.method, req.path, body) }()
		var r harness.Reply
		select {
		case r = <-answer:
		case <-time.After(frozenGuard):
			pg.Thaw()
			t.Fatalf("%s %s: no answer after %v while the database was frozen (then: %v)", req.method, req.path, frozenGuard, <-answer)
		}
		t.Logf("%s %s while the database is frozen: %v after %v", req.method, req.path, r, r.Took.Round(time.Millisecond))
		if r.Err != nil || r.Code != http.StatusServiceUnavailable {
			t.Errorf("%s %s while the database is frozen: %v, want 503", req.method, req.path, r)
		} else if req.path != "/readyz" && r.Description() == "" {
			t.Errorf("%s %s while the database is frozen: 503 without a description: %v", req.method, req.path, r)
		} else if req.path == "/readyz" && r.Body["failed"] != "store" {
			t.Errorf("GET /readyz while the database is frozen: %v, want the answer to name the failed check \"store\"", r)
		}
	}
	// The request's log line is written just after its answer is sent.
	for wait := time.Now().Add(frozenGuard); !strings.Contains(b.Log(), "readiness check: store: get record instance/readiness-probe: postgres server did not answer"); {
		if time.Now().After(wait) {
			t.Errorf("the log does not say /readyz failed because the store did not answer:\n%s", harness.Tail(b.Log(), 3000))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	pg.Thaw()

	// The platform retries; the broker serves again by itself.
	untilDone(t, b, "PUT", "/v2/service_instances/during", provisionBody, http.StatusCreated, http.StatusOK)
	r := untilDone(t, b, "PUT", "/v2/service_instances/during-async"+async, provisionBody, http.StatusAccepted, http.StatusOK)
	if r.Code == http.StatusAccepted {
		if r, err := b.LastOperation(time.Minute, "/v2/service_instances/during-async", r.Operation()); err != nil || r.State() != "succeeded" {
			t.Fatalf("async provision retried after the thaw: %v %v", r, err)
		}
	}
	for _, id := range []string{"before", "async-before", "during", "during-async"} {
		untilDone(t, b, "PUT", "/v2/service_instances/"+id, provisionBody, http.StatusOK)
	}
	untilDone(t, b, "GET", "/readyz", nil, http.StatusOK)
	if got := buckets(t, b); len(got) != 4 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 4 {
		t.Errorf("buckets after the thaw: %q, want one for each of the 4 instances", got)
	}
	for _, id := range []string{"before", "async-before", "during", "during-async"} {
		untilDone(t, b, "DELETE", "/v2/service_instances/"+id+deleteQuery, nil, http.StatusOK)
	}
	if got := buckets(t, b); len(got) != 0 {
		t.Errorf("buckets after every deprovision: %q, want none", got)
	}
}
