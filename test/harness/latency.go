package harness

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// delayed waits before each request it sends on.
type delayed struct {
	wait time.Duration
	next http.RoundTripper
}

func (d delayed) RoundTrip(r *http.Request) (*http.Response, error) {
	t := time.NewTimer(d.wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return d.next.RoundTrip(r)
}

// DelayedHTTPClient is an HTTP client that waits latency before sending
// each request: a backend as far away as a cloud region's, on loopback, for
// benchmarks that compare what a round trip costs. Nil when latency is not
// positive (the caller keeps its default client).
func DelayedHTTPClient(latency time.Duration) *http.Client {
	if latency <= 0 {
		return nil
	}
	return &http.Client{Transport: delayed{wait: latency, next: http.DefaultTransport.(*http.Transport).Clone()}}
}

// Calls records the requests sent through the clients it makes, each as
// the span from the moment it is handed to the transport (before any
// delay) to its answer's headers, so that a benchmark can say how many
// requests an operation made and how many round trips it waited for.
type Calls struct {
	mu    sync.Mutex
	spans []span
}

type span struct{ start, end time.Time }

// Client is an HTTP client whose requests c records, each waited latency
// first as DelayedHTTPClient's are (none when latency is not positive).
func (c *Calls) Client(latency time.Duration) *http.Client {
	var next http.RoundTripper = http.DefaultTransport.(*http.Transport).Clone()
	if latency > 0 {
		next = delayed{wait: latency, next: next}
	}
	return &http.Client{Transport: counted{calls: c, next: next}}
}

// Take returns what was recorded since the last Take (or since c was
// made) and starts again: the requests, and the round trips, the longest
// chain of requests each sent after the one before it was answered. Calls
// in flight at once count once; a call made only after another's answer
// counts again, which is the wait a client a round trip away from the
// server cannot hide.
func (c *Calls) Take() (requests, roundTrips int) {
	c.mu.Lock()
	spans := c.spans
	c.spans = nil
	c.mu.Unlock()
	return len(spans), chain(spans)
}

// chain is the number of spans in the longest sequence of which each
// starts after the one before it ended.
func chain(spans []span) int {
	slices.SortFunc(spans, func(a, b span) int { return a.end.Compare(b.end) })
	depth := make([]int, len(spans))
	longest := 0
	for i, s := range spans {
		depth[i] = 1
		for j := range i {
			if !spans[j].end.After(s.start) {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
		longest = max(longest, depth[i])
	}
	return longest
}

// counted records each request's span in calls.
type counted struct {
	calls *Calls
	next  http.RoundTripper
}

func (t counted) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	end := time.Now()
	t.calls.mu.Lock()
	t.calls.spans = append(t.calls.spans, span{start: start, end: end})
	t.calls.mu.Unlock()
	return resp, err
}
