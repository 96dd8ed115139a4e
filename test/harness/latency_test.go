package harness

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestCallsCountsRoundTrips(t *testing.T) {
	// Requests to /pair are held until two have arrived, so the two are
	// in flight at once whatever the scheduler does.
	arrived := make(chan struct{}, 2)
	both := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pair" {
			arrived <- struct{}{}
			if len(arrived) == 2 {
				once.Do(func() { close(both) })
			}
			<-both
		}
	}))
	defer srv.Close()
	var calls Calls
	c := calls.Client(0)
	get := func(path string) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}

	get("/")
	get("/")
	if n, rt := calls.Take(); n != 2 || rt != 2 {
		t.Errorf("two requests one after the other: %d requests in %d round trips, want 2 in 2", n, rt)
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); get("/pair") }()
	}
	wg.Wait()
	get("/")
	if n, rt := calls.Take(); n != 3 || rt != 2 {
		t.Errorf("two requests at once, then one: %d requests in %d round trips, want 3 in 2", n, rt)
	}
	if n, rt := calls.Take(); n != 0 || rt != 0 {
		t.Errorf("nothing since the last Take: %d requests in %d round trips, want 0 in 0", n, rt)
	}
}

func TestChain(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for name, tc := range map[string]struct {
		reason string
		spans  []span
		want   int
	}{
		"none":       {"no call, no round trip", nil, 0},
		"sequence":   {"each call after the one before", []span{{at(0), at(1)}, {at(1), at(2)}, {at(2), at(3)}}, 3},
		"overlapped": {"calls in flight at once count once", []span{{at(0), at(2)}, {at(1), at(3)}}, 1},
		"staggered": {"a call sent after one answer while another is in flight still waited for that answer",
			[]span{{at(0), at(1)}, {at(0), at(5)}, {at(2), at(3)}}, 2},
		"unsorted": {"the order recorded does not matter", []span{{at(2), at(3)}, {at(0), at(1)}, {at(4), at(5)}}, 3},
	} {
		if got := chain(tc.spans); got != tc.want {
			t.Errorf("%s: chain = %d, want %d: %s", name, got, tc.want, tc.reason)
		}
	}
}
