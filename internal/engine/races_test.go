package engine_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestDeleteRacingPut sends a provision and a deprovision of the same id at
// once, many times: each id ends fully present (the record ready and its
// bucket there) or fully gone (no bucket), never half.
func TestDeleteRacingPut(t *testing.T) {
	h := newHarness(t)
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		raw := newID()
		ids[i] = raw
		id := instancePth + raw
		wg.Add(2)
		go func() { defer wg.Done(); h.do("PUT", async(id), provisionBody(planStd, nil)) }()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) // land anywhere in the provision
			h.do("DELETE", del(id, planStd, true), nil)
		}()
	}
	wg.Wait()
	buckets := map[string]bool{}
	for _, b := range h.buckets() {
		buckets[b] = true
	}
	present := 0
	for _, raw := range ids {
		id := instancePth + raw
		// Let whatever was started finish.
		if r := h.do("GET", id+"/last_operation", nil); r.code == http.StatusOK && r.str("state") == "in progress" {
			h.waitOp(id, "")
		}
		bucket := driver.BucketName(h.prefix, "instance", raw)
		has := h.bucketExists(bucket)
		switch r := h.do("GET", id, nil); r.code {
		case http.StatusOK:
			present++
			if !has {
				t.Errorf("%s: the instance is there but its bucket is not", raw)
			}
		case http.StatusNotFound:
			if has {
				t.Errorf("%s: the instance is gone but its bucket %s is left", raw, bucket)
			}
		default:
			t.Errorf("%s: GET = %d %v", raw, r.code, r.body)
		}
	}
	t.Logf("%d of %d ids ended present, the rest gone", present, n)
	if present == n {
		t.Log("no delete landed after its provision started: the race was not exercised this run")
	}
}

// TestUnbindRacingBind does the same for bindings: a key exists exactly
// when the binding does.
func TestUnbindRacingBind(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = newID()
		b := inst + "/service_bindings/" + ids[i]
		wg.Add(2)
		go func() { defer wg.Done(); h.do("PUT", async(b), bindBody(planStd, nil)) }()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			h.do("DELETE", del(b, planStd, true), nil)
		}()
	}
	wg.Wait()
	for _, bid := range ids {
		b := inst + "/service_bindings/" + bid
		if r := h.do("GET", b+"/last_operation", nil); r.code == http.StatusOK && r.str("state") == "in progress" {
			h.waitOp(b, "")
		}
	}
	users := h.users()
	bound := 0
	for _, bid := range ids {
		b := inst + "/service_bindings/" + bid
		keys := users[driver.UserName(h.prefix, "binding", bid)]
		switch r := h.do("GET", b, nil); r.code {
		case http.StatusOK:
			bound++
			if len(keys) != 1 || keys[0] != r.creds()["access_key_id"] {
				t.Errorf("%s: bound, but live keys are %v (answered %v)", bid, keys, r.creds()["access_key_id"])
				rec, _ := h.store.Get(context.Background(), engine.KindBinding, bid)
				t.Logf("record: phase %s op %+v history %+v", rec.Phase, rec.Op, rec.History)
			}
		case http.StatusNotFound:
			if keys != nil {
				t.Errorf("%s: unbound, but its user is left with keys %v", bid, keys)
			}
		default:
			t.Errorf("%s: GET = %d %v", bid, r.code, r.body)
		}
	}
	t.Logf("%d of %d bindings ended bound, the rest gone", bound, n)
}
