package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	provisionBody = harness.ProvisionBody
	bindBody      = harness.BindBody
	deleteQuery   = harness.DeleteQuery
)

// TestCrashPointsConverge kills the broker at every crash point, starts it
// again on the same data dir, replays what a platform would (re-send the
// request), and checks the end state on the backend: one bucket per
// instance, one live key per binding, the same credentials on every answer,
// nothing left after a delete.
func TestCrashPointsConverge(t *testing.T) {
	scenarios := map[string]func(t *testing.T, point string){}
	for _, p := range crashpoint.Points {
		switch strings.SplitN(p, "/", 2)[0] {
		case "provision":
			scenarios[p] = crashProvision
		case "deprovision":
			scenarios[p] = crashDeprovision
		case "bind":
			scenarios[p] = crashBind
		case "unbind":
			scenarios[p] = crashUnbind
		}
	}
	for _, p := range crashpoint.Points {
		run, ok := scenarios[p]
		if !ok {
			t.Errorf("crash point %s has no scenario", p)
			continue
		}
		t.Run(p, func(t *testing.T) { run(t, p) })
	}
}

func crashProvision(t *testing.T, point string) {
	b := newBroker(t)
	b.Start(point)
	inst := "/v2/service_instances/crash-" + strings.ReplaceAll(point, "/", "-")
	if r := b.Do("PUT", inst, provisionBody); r.Err == nil && r.Code != http.StatusCreated {
		t.Fatalf("first PUT: %d %v", r.Code, r.Body)
	}
	b.WaitCrash()
	b.Start()
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK, http.StatusCreated)
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK)
	if got := buckets(t, b); len(got) != 1 {
		t.Errorf("buckets = %v, want exactly one", got)
	}
}

func crashBind(t *testing.T, point string) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/i"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	b.Stop()
	b.Start(point)
	bind := inst + "/service_bindings/crash-" + strings.ReplaceAll(point, "/", "-")
	if r := b.Do("PUT", bind, bindBody); r.Err == nil {
		t.Fatalf("first bind answered %d %v before the crash", r.Code, r.Body)
	}
	b.WaitCrash()
	b.Start()
	first := untilDone(t, b, "PUT", bind, bindBody, http.StatusOK, http.StatusCreated)
	again := untilDone(t, b, "PUT", bind, bindBody, http.StatusOK)
	c := first.Creds()
	if c == nil || again.Creds()["secret_access_key"] != c["secret_access_key"] || again.Creds()["access_key_id"] != c["access_key_id"] {
		t.Fatalf("credentials differ between answers: %v / %v", c["access_key_id"], again.Creds()["access_key_id"])
	}
	keys := keys(t, b)
	if len(keys) != 1 {
		t.Fatalf("users = %v, want one", keys)
	}
	for _, ks := range keys {
		if len(ks) != 1 || ks[0] != c["access_key_id"] {
			t.Errorf("live keys = %v, want only the answered %v", ks, c["access_key_id"])
		}
	}
	if err := b.Backend.Works(c); err != nil {
		t.Errorf("the answered credentials do not work: %v", err)
	}
}

func crashDeprovision(t *testing.T, point string) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/i"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	b.Stop()
	b.Start(point)
	if r := b.Do("DELETE", inst+deleteQuery, nil); r.Err == nil && point == "deprovision/record-written" {
		t.Fatalf("delete answered %d before the crash", r.Code)
	}
	b.WaitCrash()
	b.Start()
	// The resumed deprovision finishes by itself; the platform's re-sent
	// DELETE gets 200 (it waited for it) or 410 (already done).
	untilDone(t, b, "DELETE", inst+deleteQuery, nil, http.StatusOK, http.StatusGone)
	untilDone(t, b, "DELETE", inst+deleteQuery, nil, http.StatusGone)
	if got, k := buckets(t, b), keys(t, b); len(got) != 0 || len(k) != 0 {
		t.Errorf("left after deprovision: buckets %v, users %v", got, k)
	}
	if err := b.Backend.Works(c); err == nil {
		t.Error("the binding's key still works")
	}
}

func crashUnbind(t *testing.T, point string) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/i"
	bind := inst + "/service_bindings/b"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", bind, bindBody, http.StatusCreated).Creds()
	b.Stop()
	b.Start(point)
	b.Do("DELETE", bind+deleteQuery, nil)
	b.WaitCrash()
	b.Start()
	untilDone(t, b, "DELETE", bind+deleteQuery, nil, http.StatusOK, http.StatusGone)
	untilDone(t, b, "DELETE", bind+deleteQuery, nil, http.StatusGone)
	if k := keys(t, b); len(k) != 0 {
		t.Errorf("users left after unbind: %v", k)
	}
	if err := b.Backend.Works(c); err == nil {
		t.Error("the unbound key still works")
	}
	if got := buckets(t, b); len(got) != 1 {
		t.Errorf("buckets = %v, want the instance's one", got)
	}
}

// TestRestartKeepsEverything: instances, bindings and objects survive a
// graceful restart on the same data dir, and duplicate requests after it
// answer from the stored records.
func TestRestartKeepsEverything(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/keep"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	if err := b.Backend.Works(c); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	b.Start()
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK)
	again := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusOK).Creds()
	if again["secret_access_key"] != c["secret_access_key"] {
		t.Error("credentials changed across a restart")
	}
	if err := b.Backend.Works(again); err != nil {
		t.Errorf("credentials do not work after a restart: %v", err)
	}
}
