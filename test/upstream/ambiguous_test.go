package upstream

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// TestLiveInstanceIsNeverDeletedOnAnAmbiguousLook: the answer to a
// synchronous provision is lost after the upstream made the instance, and
// the upstream's last_operation (asked without an operation) answers
// "failed", "The operation could not be found." for it. That is no proof
// of a failed creation: where the service is instances_retrievable, GET
// finds the instance and it is adopted; where it is not, bucketbroker
// sends the identical provision again and, answered 409, fails for an
// operator. Either way the upstream's instance is created once and never
// deleted (until the platform deprovisions).
func TestLiveInstanceIsNeverDeletedOnAnAmbiguousLook(t *testing.T) {
	cases := map[string]struct {
		reason string
		args   []string
		// wantCode is the answer to the provision; wantDesc a part of its
		// description.
		wantCode int
		wantDesc string
	}{
		"instances_retrievable": {
			reason:   "GET decides: the instance is there, so it is adopted",
			wantCode: http.StatusCreated,
		},
		"not retrievable": {
			reason:   "the identical PUT answered 409 leaves it to an operator, deleting nothing",
			args:     []string{"-not-retrievable"},
			wantCode: http.StatusUnprocessableEntity,
			wantDesc: "cannot tell whether the instance is live and deletes nothing",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"-forgetful-last-operation", "-lose-first-answer", "-duplicate-status", "409"}, tc.args...)
			ib := harness.StartIllBroker(t, illBinary, args...)
			b := front(t, ib)
			path := "/v2/service_instances/i-live"
			r := b.Do("PUT", path, illBody(illbroker.PlanSync))
			if r.Err != nil || r.Code != tc.wantCode || !strings.Contains(r.Description(), tc.wantDesc) {
				t.Fatalf("provision whose answer was lost: %s, want %d with %q (%s)", r, tc.wantCode, tc.wantDesc, tc.reason)
			}
			st := ib.State()
			if st.Failures["first-answer-lost"] == 0 {
				t.Fatal("the ill broker lost no answer: the test proves nothing")
			}
			if in := st.Instances["i-live"]; in == nil || !in.Exists || in.Creates != 1 || in.Deletes != 0 {
				t.Fatalf("upstream instance: %s, want created once and never deleted (%s)", stats(in), tc.reason)
			}
			if tc.wantCode != http.StatusCreated {
				// The platform's deprovision is what deletes it.
				want(t, b.Do("DELETE", path+illQuery(illbroker.PlanSync), nil), http.StatusOK)
				if in := ib.State().Instances["i-live"]; in.Exists || in.Deletes != 1 {
					t.Fatalf("upstream instance after the platform's deprovision: %s", stats(in))
				}
				return
			}
			want(t, b.Do("PUT", path, illBody(illbroker.PlanSync)), http.StatusOK)
			// A bind whose answer is lost: GET fetches the binding.
			bp := path + "/service_bindings/b-live"
			first := want(t, b.Do("PUT", bp, map[string]any{"service_id": illbroker.ServiceID, "plan_id": illbroker.PlanSync}), http.StatusCreated)
			if bs := ib.State().Bindings["b-live"]; bs.Creates != 1 || bs.Deletes != 0 || bs.CredentialsIssued != 1 || len(first.Creds()) == 0 {
				t.Fatalf("upstream binding: %+v, credentials %d fields; want one create, adopted by GET", bs, len(first.Creds()))
			}
			noErrorLines(t, b)
		})
	}
}

// TestUnreachableUpstreamIsDescribedByName: while the upstream is down,
// the platform's last_operation reads "upstream ill is unreachable;
// retrying", and the log keeps the transport error.
func TestUnreachableUpstreamIsDescribedByName(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary)
	b := front(t, ib)
	ib.Stop()

	path := "/v2/service_instances/i-down"
	r := want(t, b.Do("PUT", path+"?accepts_incomplete=true", illBody(illbroker.PlanAsync)), http.StatusAccepted)
	const desc = "upstream ill is unreachable; retrying"
	var lo harness.Reply
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		lo = want(t, b.Do("GET", path+"/last_operation?operation="+r.Operation(), nil), http.StatusOK)
		if strings.Contains(lo.Description(), "retrying") {
			break
		}
	}
	if !strings.Contains(lo.Description(), desc) {
		t.Fatalf("last_operation while the upstream is down: %s, want a description saying %q", lo, desc)
	}
	for _, internal := range []string{"127.0.0.1", "dial tcp", "connection refused", "http://"} {
		if strings.Contains(lo.Description(), internal) {
			t.Errorf("last_operation's description %q shows the platform %q", lo.Description(), internal)
		}
	}
	if !b.LogShows(10*time.Second, "Backend call failed; retrying", "connection refused") {
		t.Errorf("the log lacks the transport error:\n%s", harness.Tail(b.Log(), 3000))
	}
}

// TestEmptyMaintenanceInfoIsAbsent: clients generated from the spec's
// OpenAPI document send "maintenance_info":{} on every PUT and PATCH; it
// is the same request as one without, so a duplicate is a 200, not a 400
// or a 409, and the upstream gets no maintenance_info.
func TestEmptyMaintenanceInfoIsAbsent(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary)
	b := front(t, ib)
	path := "/v2/service_instances/i-mi"
	withEmpty := illBody(illbroker.PlanSync)
	withEmpty["maintenance_info"] = map[string]any{}
	want(t, b.Do("PUT", path, withEmpty), http.StatusCreated)
	want(t, b.Do("PUT", path, illBody(illbroker.PlanSync)), http.StatusOK)
	want(t, b.Do("PUT", path, withEmpty), http.StatusOK)
	want(t, b.Do("PATCH", path, map[string]any{"service_id": illbroker.ServiceID, "parameters": map[string]any{"size": "large"},
		"maintenance_info": map[string]any{}}), http.StatusOK)
	in := ib.State().Instances["i-mi"]
	if in == nil || in.Creates != 1 || string(in.Parameters) != `{"size":"large"}` || strings.Contains(string(in.LastBody), "maintenance_info") {
		t.Fatalf("upstream instance: %s, last body %s; want one create, the update applied, no maintenance_info forwarded", stats(in), in.LastBody)
	}
}

// stats is an upstream instance's history, readable.
func stats(in *illbroker.InstanceStats) string {
	if in == nil {
		return "unknown to the upstream"
	}
	return fmt.Sprintf("exists %t, %d creates, %d deletes, state %q, parameters %s", in.Exists, in.Creates, in.Deletes, in.State, in.Parameters)
}

// TestIdenticalPUTThenCrash: the answer to a synchronous provision is lost,
// last_operation answers "failed" for the live instance and the service
// is not instances_retrievable, so bucketbroker sends the identical
// provision again, which this upstream answers as the spec asks (200).
// The front broker dies right after that answer (provision/
// upstream-answered), before recording it; restarted, it sends the
// identical provision once more. The instance is created once and never
// deleted, and the platform's retry gets the instance.
func TestIdenticalPUTThenCrash(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary, "-forgetful-last-operation", "-lose-first-answer",
		"-not-retrievable", "-duplicate-status", "200")
	b := harness.New(t, binary)
	b.Front("ill", ib.URL(), harness.IllUser, harness.IllPass, false)
	b.Start(string(crashpoint.ProvisionUpstreamAnswered))
	path := "/v2/service_instances/i-again"
	first := b.Do("PUT", path, illBody(illbroker.PlanSync))
	if err := b.TryWaitCrash(60 * time.Second); err != nil {
		t.Fatalf("provision answered %s and did not die at %s: %v", first, crashpoint.ProvisionUpstreamAnswered, err)
	}
	in := ib.State().Instances["i-again"]
	if in == nil || in.Creates != 1 || in.Identical != 1 || in.Deletes != 0 {
		t.Fatalf("upstream instance before the restart: %s (identical %d), want created once, sent once more identically, never deleted",
			stats(in), in.Identical)
	}
	b.Start()
	want(t, b.Do("PUT", path, illBody(illbroker.PlanSync)), http.StatusCreated, http.StatusOK)
	want(t, b.Do("PUT", path, illBody(illbroker.PlanSync)), http.StatusOK)
	if in := ib.State().Instances["i-again"]; !in.Exists || in.Creates != 1 || in.Deletes != 0 || in.Identical < 2 {
		t.Fatalf("upstream instance after the restart: %s (identical %d), want created once and never deleted, the identical provision sent again",
			stats(in), in.Identical)
	}
	want(t, b.Do("DELETE", path+illQuery(illbroker.PlanSync), nil), http.StatusOK)
	if in := ib.State().Instances["i-again"]; in.Exists || in.Deletes != 1 {
		t.Fatalf("upstream instance after the platform's deprovision: %s", stats(in))
	}
	noErrorLines(t, b)
}
