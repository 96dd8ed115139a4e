package e2e

import (
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

const (
	planAsync  = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b13"
	incomplete = "accepts_incomplete=true"

	// The spec's descriptions, which clients compare word for word.
	descAsyncRequired    = "This service plan requires client support for asynchronous service operations."
	descConcurrencyError = "The Service Broker does not support concurrent requests that mutate the same resource."
)

// budgeted returns a broker with a sync budget (not started). The budget
// is far above what an operation on the embedded server takes, so that a
// loaded machine does not turn an answer into a 202; the binary's default
// is 5 s.
func budgeted(t *testing.T) *harness.Broker {
	b := newBroker(t)
	b.SyncBudget = 30 * time.Second
	return b
}

// TestCloudFoundry plays Cloud Foundry, which sends accepts_incomplete=true
// on every call and polls every 60 s: on the standard plan each first answer
// is the finished one, the bind's with working credentials, and nothing is
// polled.
func TestCloudFoundry(t *testing.T) {
	b := budgeted(t)
	b.Start()
	inst := "/v2/service_instances/cf"
	bind := inst + "/service_bindings/app"
	body := maps.Clone(provisionBody)
	body["parameters"] = map[string]any{"purge_on_delete": true}
	if r := b.Do("PUT", inst+"?"+incomplete, body); r.Err != nil || r.Code != http.StatusCreated || r.Operation() != "" {
		t.Fatalf("provision: %s, want 201 without an operation", r)
	}
	r := b.Do("PUT", bind+"?"+incomplete, bindBody)
	if r.Err != nil || r.Code != http.StatusCreated {
		t.Fatalf("bind: %s, want 201", r)
	}
	c := r.Creds()
	if err := b.Backend.Works(c); err != nil {
		t.Fatalf("the first answer's credentials: %v", err)
	}
	update := map[string]any{"service_id": serviceID, "parameters": map[string]any{"labels": map[string]any{"team": "cf"}}}
	if r := b.Do("PATCH", inst+"?"+incomplete, update); r.Err != nil || r.Code != http.StatusOK {
		t.Fatalf("update: %s, want 200", r)
	}
	if r := b.Do("DELETE", bind+deleteQuery+"&"+incomplete, nil); r.Err != nil || r.Code != http.StatusOK {
		t.Fatalf("unbind: %s, want 200", r)
	}
	if err := b.Backend.Works(c); err == nil {
		t.Error("the credentials still work after the unbind's 200")
	}
	if r := b.Do("DELETE", inst+deleteQuery+"&"+incomplete, nil); r.Err != nil || r.Code != http.StatusOK {
		t.Fatalf("deprovision: %s, want 200", r)
	}
	if names := buckets(t, b); len(names) != 0 {
		t.Errorf("buckets after the deprovision's 200: %v", names)
	}
	// A plan that requires asynchrony still answers 202.
	ab := maps.Clone(provisionBody)
	ab["plan_id"] = planAsync
	if r := b.Do("PUT", "/v2/service_instances/cf-async?"+incomplete, ab); r.Err != nil || r.Code != http.StatusAccepted || r.Operation() == "" {
		t.Fatalf("provision on standard-async: %s, want 202 with an operation", r)
	}
}

// TestSpecErrorBodies: the spec's error codes with its exact descriptions
// (bucketbroker's text in detail), and 400 for an operation a live
// instance never had.
func TestSpecErrorBodies(t *testing.T) {
	b := newBroker(t)
	b.Start()
	ab := maps.Clone(provisionBody)
	ab["plan_id"] = planAsync
	r := b.Do("PUT", "/v2/service_instances/needs-async", ab)
	if r.Code != http.StatusUnprocessableEntity || r.Body["error"] != "AsyncRequired" || r.Description() != descAsyncRequired || r.Body["detail"] == "" {
		t.Errorf("sync provision on standard-async: %s, want 422 AsyncRequired with the spec's description", r)
	}

	// An instance whose deprovision failed (its bucket holds an object) is
	// still there: provisioning it again is a concurrent mutation.
	inst := "/v2/service_instances/full"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	if err := b.Backend.Put(c, "kept", "x"); err != nil {
		t.Fatal(err)
	}
	untilDone(t, b, "DELETE", inst+"/service_bindings/b"+deleteQuery, nil, http.StatusOK)
	if r := b.Do("DELETE", inst+deleteQuery, nil); r.Code < 400 {
		t.Fatalf("deprovision of a non-empty bucket: %s, want an error", r)
	}
	r = b.Do("PUT", inst, provisionBody)
	if r.Code != http.StatusUnprocessableEntity || r.Body["error"] != "ConcurrencyError" || r.Description() != descConcurrencyError || r.Body["detail"] == "" {
		t.Errorf("provision after a failed deprovision: %s, want 422 ConcurrencyError with the spec's description", r)
	}

	if r := b.Do("GET", inst+"/last_operation?operation=never", nil); r.Code != http.StatusBadRequest {
		t.Errorf("last_operation of an unknown operation: %s, want 400", r)
	}
	if r := b.Do("GET", "/v2/service_instances/nobody/last_operation?operation=never", nil); r.Code != http.StatusNotFound {
		t.Errorf("last_operation of an unknown instance: %s, want 404", r)
	}
}

// TestKillInsideSyncBudget: kill -9 (a crash point) while a request waits
// within the sync budget; after the restart the platform's retry, with
// accepts_incomplete=true, finds the operation resumed as an asynchronous
// one: 202 and a poll, or the finished answer. Exactly one bucket, one key,
// and the audit finds no drift.
func TestKillInsideSyncBudget(t *testing.T) {
	inst := "/v2/service_instances/k"
	bind := inst + "/service_bindings/app"
	rotation := maps.Clone(bindBody)
	rotation["predecessor_binding_id"] = "app"
	cases := []struct {
		point, method, path string
		body                map[string]any
		bound               bool // a binding exists before the call
		done                []int
		buckets, keys       int
	}{
		{"provision/record-written", "PUT", inst, provisionBody, false, []int{http.StatusOK}, 1, 0},
		{"provision/bucket-created", "PUT", inst, provisionBody, false, []int{http.StatusOK}, 1, 0},
		{"bind/record-written", "PUT", bind, bindBody, false, []int{http.StatusOK}, 1, 1},
		{"bind/key-created", "PUT", bind, bindBody, false, []int{http.StatusOK}, 1, 1},
		{"bind/key-recorded", "PUT", bind, bindBody, false, []int{http.StatusOK}, 1, 1},
		{"bind/key-created", "PUT", inst + "/service_bindings/app2", rotation, true, []int{http.StatusOK}, 1, 2},
		{"unbind/user-revoked", "DELETE", bind + deleteQuery, nil, true, []int{http.StatusGone}, 1, 0},
		{"deprovision/bucket-deleted", "DELETE", inst + deleteQuery, nil, false, []int{http.StatusGone}, 0, 0},
	}
	for _, tc := range cases {
		name := tc.point
		if tc.body != nil && tc.body["predecessor_binding_id"] != nil {
			name += "/rotation"
		}
		t.Run(name, func(t *testing.T) {
			b := budgeted(t)
			b.Start()
			binding := strings.Contains(tc.path, "/service_bindings/")
			if tc.method != "PUT" || binding {
				untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
			}
			if tc.bound {
				untilDone(t, b, "PUT", bind, bindBody, http.StatusCreated)
			}
			b.Stop()
			b.Start(tc.point)
			path := tc.path + "?" + incomplete
			if tc.method == "DELETE" {
				path = tc.path + "&" + incomplete
			}
			var body any // a DELETE has none (a nil map would be sent as null)
			if tc.body != nil {
				body = tc.body
			}
			// bind/key-recorded of a new user's first key is hit after the
			// write that records the key and ends the operation: the answer
			// derived from that record may reach the platform before the
			// process dies. It must then be the finished bind, and the
			// restarted broker must answer the same key.
			first := b.Do(tc.method, path, body)
			finishing := tc.point == "bind/key-recorded" && !tc.bound
			switch {
			case first.Err == nil && (!finishing || first.Code != http.StatusCreated):
				t.Fatalf("the call answered %s; the process should have died at %s", first, tc.point)
			case first.Err == nil:
				t.Logf("the finished answer came before the crash: %d", first.Code)
			}
			b.WaitCrash()
			b.Start()
			r := untilDone(t, b, tc.method, path, body, append([]int{http.StatusAccepted, http.StatusCreated}, tc.done...)...)
			if r.Code == http.StatusAccepted {
				target, _, _ := strings.Cut(tc.path, "?")
				if p, err := b.LastOperation(60*time.Second, target, r.Operation()); err != nil || (p.Code == http.StatusOK && p.State() != "succeeded") {
					t.Fatalf("resumed operation: %s (%v)", p, err)
				}
			}
			final := untilDone(t, b, tc.method, path, body, tc.done...)
			if tc.method == "PUT" && binding {
				if err := b.Backend.Works(final.Creds()); err != nil {
					t.Errorf("credentials after the resumed bind: %v", err)
				}
				if first.Err == nil && first.Creds()["access_key_id"] != final.Creds()["access_key_id"] {
					t.Errorf("key %v after the restart, want %v, the one answered before the crash",
						final.Creds()["access_key_id"], first.Creds()["access_key_id"])
				}
			}
			if n := len(buckets(t, b)); n != tc.buckets {
				t.Errorf("%d buckets, want %d", n, tc.buckets)
			}
			nk := 0
			for _, ks := range keys(t, b) {
				nk += len(ks)
			}
			if nk != tc.keys {
				t.Errorf("%d keys, want %d: %v", nk, tc.keys, keys(t, b))
			}
			b.Stop()
			if code, out, err := b.Audit(); code != 0 || err != nil {
				t.Errorf("audit: %d %v\n%s", code, err, out)
			}
		})
	}
}

// TestRetrievable: GET instance returns the parameters and the
// maintenance_info the instance is at, GET binding the parameters beside the
// credentials; a maintenance_info.version the plan is not at is 422
// MaintenanceInfoConflict with the spec's description.
func TestRetrievable(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/shown"
	body := maps.Clone(provisionBody)
	body["parameters"] = map[string]any{"labels": map[string]any{"team": "a"}}
	body["maintenance_info"] = map[string]any{"version": "9.9.9"}
	r := b.Do("PUT", inst, body)
	if r.Code != http.StatusUnprocessableEntity || r.Body["error"] != "MaintenanceInfoConflict" ||
		r.Description() != "The maintenance_info.version field provided in the request does not match the maintenance_info.version field provided in the Service Broker's Catalog." {
		t.Errorf("provision at an unknown maintenance_info.version: %s", r)
	}
	body["maintenance_info"] = map[string]any{"version": "1.0.0"}
	untilDone(t, b, "PUT", inst, body, http.StatusCreated)
	bb := maps.Clone(bindBody)
	bb["parameters"] = map[string]any{"access": "read-only"}
	untilDone(t, b, "PUT", inst+"/service_bindings/ro", bb, http.StatusCreated)

	g := untilDone(t, b, "GET", inst, nil, http.StatusOK)
	if p, _ := g.Body["parameters"].(map[string]any); p == nil || p["labels"] == nil {
		t.Errorf("GET instance parameters = %v", g.Body["parameters"])
	}
	if mi, _ := g.Body["maintenance_info"].(map[string]any); mi["version"] != "1.0.0" || mi["description"] == nil {
		t.Errorf("GET instance maintenance_info = %v", g.Body["maintenance_info"])
	}
	gb := untilDone(t, b, "GET", inst+"/service_bindings/ro", nil, http.StatusOK)
	if p, _ := gb.Body["parameters"].(map[string]any); p["access"] != "read-only" {
		t.Errorf("GET binding parameters = %v", gb.Body["parameters"])
	}
	if gb.Creds()["access"] != "read-only" {
		t.Errorf("GET binding credentials = %v", gb.Creds())
	}
}
