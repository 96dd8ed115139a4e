package harness

import (
	"net/http"
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
