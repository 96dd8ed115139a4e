package engine_test

import (
	"net/http"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// TestNoWaitLeftBehind: a synchronous request waits on its record through
// a channel the next write closes; when the operation ended before the
// request looked, nothing closed it, and it stayed in the engine's map for
// good, one per resource (8 MB of heap at 20,000 instances in the scale
// benchmark). Every wait now lets go of its channel.
func TestNoWaitLeftBehind(t *testing.T) {
	h := newHarness(t)
	for i := range 20 {
		inst := h.provisioned(planStd)
		bind := inst + "/service_bindings/" + newID()
		path := bind
		if i%2 == 1 {
			path = async(bind) // answered within the sync budget, or 202
		}
		r := h.do("PUT", path, bindBody(planStd, nil))
		if r.code != http.StatusCreated && r.code != http.StatusAccepted {
			t.Fatalf("bind %d: %d %v", i, r.code, r.body)
		}
		if r.code == http.StatusAccepted {
			if s := h.waitOp(bind, r.str("operation")); s != "succeeded" {
				t.Fatalf("bind %d ended %q", i, s)
			}
		}
	}
	if n := engine.Waiting(h.eng); n != 0 {
		t.Errorf("the engine still holds %d wait channels after every request was answered, want 0", n)
	}
}
