package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
)

var (
	provisionBody = map[string]any{"service_id": serviceID, "plan_id": planStd, "organization_guid": "org", "space_guid": "space"}
	bindBody      = map[string]any{"service_id": serviceID, "plan_id": planStd, "app_guid": "app"}
	deleteQuery   = fmt.Sprintf("?service_id=%s&plan_id=%s", serviceID, planStd)
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

// untilDone re-sends a request, as a platform does, until it gets one of
// the wanted codes.
func untilDone(t *testing.T, b *broker, method, path string, body any, want ...int) reply {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var r reply
	for time.Now().Before(deadline) {
		r = b.do(method, path, body)
		for _, w := range want {
			if r.err == nil && r.code == w {
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s %s: last answer %d %v %v, want one of %v", method, path, r.code, r.body, r.err, want)
	return r
}

func crashProvision(t *testing.T, point string) {
	b := newBroker(t)
	b.start(point)
	inst := "/v2/service_instances/crash-" + strings.ReplaceAll(point, "/", "-")
	if r := b.do("PUT", inst, provisionBody); r.err == nil && r.code != http.StatusCreated {
		t.Fatalf("first PUT: %d %v", r.code, r.body)
	}
	b.waitCrash()
	b.start()
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK, http.StatusCreated)
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK)
	if got := b.buckets(); len(got) != 1 {
		t.Errorf("buckets = %v, want exactly one", got)
	}
}

func crashBind(t *testing.T, point string) {
	b := newBroker(t)
	b.start()
	inst := "/v2/service_instances/i"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	b.stop()
	b.start(point)
	bind := inst + "/service_bindings/crash-" + strings.ReplaceAll(point, "/", "-")
	if r := b.do("PUT", bind, bindBody); r.err == nil {
		t.Fatalf("first bind answered %d %v before the crash", r.code, r.body)
	}
	b.waitCrash()
	b.start()
	first := untilDone(t, b, "PUT", bind, bindBody, http.StatusOK, http.StatusCreated)
	again := untilDone(t, b, "PUT", bind, bindBody, http.StatusOK)
	c := first.creds()
	if c == nil || again.creds()["secret_access_key"] != c["secret_access_key"] || again.creds()["access_key_id"] != c["access_key_id"] {
		t.Fatalf("credentials differ between answers: %v / %v", c["access_key_id"], again.creds()["access_key_id"])
	}
	keys := b.keys()
	if len(keys) != 1 {
		t.Fatalf("users = %v, want one", keys)
	}
	for _, ks := range keys {
		if len(ks) != 1 || ks[0] != c["access_key_id"] {
			t.Errorf("live keys = %v, want only the answered %v", ks, c["access_key_id"])
		}
	}
	if err := works(b, c); err != nil {
		t.Errorf("the answered credentials do not work: %v", err)
	}
}

func crashDeprovision(t *testing.T, point string) {
	b := newBroker(t)
	b.start()
	inst := "/v2/service_instances/i"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).creds()
	b.stop()
	b.start(point)
	if r := b.do("DELETE", inst+deleteQuery, nil); r.err == nil && point == "deprovision/record-written" {
		t.Fatalf("delete answered %d before the crash", r.code)
	}
	b.waitCrash()
	b.start()
	// The resumed deprovision finishes by itself; the platform's re-sent
	// DELETE gets 200 (it waited for it) or 410 (already done).
	untilDone(t, b, "DELETE", inst+deleteQuery, nil, http.StatusOK, http.StatusGone)
	untilDone(t, b, "DELETE", inst+deleteQuery, nil, http.StatusGone)
	if got, k := b.buckets(), b.keys(); len(got) != 0 || len(k) != 0 {
		t.Errorf("left after deprovision: buckets %v, users %v", got, k)
	}
	if err := works(b, c); err == nil {
		t.Error("the binding's key still works")
	}
}

func crashUnbind(t *testing.T, point string) {
	b := newBroker(t)
	b.start()
	inst := "/v2/service_instances/i"
	bind := inst + "/service_bindings/b"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", bind, bindBody, http.StatusCreated).creds()
	b.stop()
	b.start(point)
	b.do("DELETE", bind+deleteQuery, nil)
	b.waitCrash()
	b.start()
	untilDone(t, b, "DELETE", bind+deleteQuery, nil, http.StatusOK, http.StatusGone)
	untilDone(t, b, "DELETE", bind+deleteQuery, nil, http.StatusGone)
	if k := b.keys(); len(k) != 0 {
		t.Errorf("users left after unbind: %v", k)
	}
	if err := works(b, c); err == nil {
		t.Error("the unbound key still works")
	}
	if got := b.buckets(); len(got) != 1 {
		t.Errorf("buckets = %v, want the instance's one", got)
	}
}

// TestRestartKeepsEverything: instances, bindings and objects survive a
// graceful restart on the same data dir, and duplicate requests after it
// answer from the stored records.
func TestRestartKeepsEverything(t *testing.T) {
	b := newBroker(t)
	b.start()
	inst := "/v2/service_instances/keep"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).creds()
	if err := works(b, c); err != nil {
		t.Fatal(err)
	}
	b.stop()
	b.start()
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK)
	again := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusOK).creds()
	if again["secret_access_key"] != c["secret_access_key"] {
		t.Error("credentials changed across a restart")
	}
	if err := works(b, again); err != nil {
		t.Errorf("credentials do not work after a restart: %v", err)
	}
}
