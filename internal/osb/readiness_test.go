package osb

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestReadinessMetrics: each /readyz check sets bucketbroker_ready and
// counts a failure by the check that failed, for the chart's alerts.
func TestReadinessMetrics(t *testing.T) {
	var failing atomic.Pointer[error] // nil: the check passes
	fail := func(err error) { failing.Store(&err) }
	b := newBroker(t, &fakeEngine{}, func(o *Options) {
		o.Ready = func(context.Context) error {
			if err := failing.Load(); err != nil {
				return *err
			}
			return nil
		}
	})
	h := b.registry
	check := func(step string, wantCode int, wantReady float64, wantFailures map[string]float64) {
		t.Helper()
		if r := b.do(t, request{method: http.MethodGet, path: "/readyz"}); r.status != wantCode {
			t.Fatalf("%s: /readyz %d, want %d", step, r.status, wantCode)
		}
		mfs, err := h.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		ready := -1.0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "bucketbroker_ready":
					ready = m.GetGauge().GetValue()
				case "bucketbroker_readiness_failures_total":
					got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		if ready != wantReady {
			t.Errorf("%s: bucketbroker_ready %v, want %v", step, ready, wantReady)
		}
		if len(got) != len(wantFailures) {
			t.Errorf("%s: failures by check %v, want %v", step, got, wantFailures)
		}
		for k, v := range wantFailures {
			if got[k] != v {
				t.Errorf("%s: failures of %q %v, want %v", step, k, got[k], v)
			}
		}
	}
	check("ready", http.StatusOK, 1, nil)
	fail(&CheckError{Check: "store", Err: errors.New("database or disk is full")})
	check("store full", http.StatusServiceUnavailable, 0, map[string]float64{"store": 1})
	check("store still full", http.StatusServiceUnavailable, 0, map[string]float64{"store": 2})
	fail(errors.New("timed out"))
	check("no check named", http.StatusServiceUnavailable, 0, map[string]float64{"store": 2, "other": 1})
	failing.Store(nil)
	check("ready again", http.StatusOK, 1, map[string]float64{"store": 2, "other": 1})
}
