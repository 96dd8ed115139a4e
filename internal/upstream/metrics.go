package upstream

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the requests to every upstream, by upstream, method,
// route and answer. One Metrics serves all upstreams of a process.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics makes the upstream metrics and registers them with reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bucketbroker_upstream_requests_total",
			Help: "Requests to upstream OSB brokers, by upstream, method, route and code (the HTTP status, or error for no answer).",
		}, []string{"upstream", "method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bucketbroker_upstream_request_duration_seconds",
			Help:    "Time until an upstream OSB broker answered (or the request failed), by upstream, method and route.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"upstream", "method", "route"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register upstream metrics: %w", err)
			}
		}
	}
	return m, nil
}

// wrap returns a RoundTripper that counts rt's requests for upstream name.
func (m *Metrics) wrap(name string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			start := time.Now()
			resp, err := rt.RoundTrip(r)
			route := routeOf(r.URL.Path)
			m.duration.WithLabelValues(name, r.Method, route).Observe(time.Since(start).Seconds())
			code := "error"
			if err == nil {
				code = strconv.Itoa(resp.StatusCode)
			}
			m.requests.WithLabelValues(name, r.Method, route, code).Inc()
			return resp, err
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// routeOf names the OSB route of a path, without its ids (a label of few
// values).
func routeOf(path string) string {
	i := strings.Index(path, "/v2/")
	if i < 0 {
		return "other"
	}
	parts := strings.Split(strings.Trim(path[i+len("/v2/"):], "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "catalog":
		return "catalog"
	case len(parts) == 2 && parts[0] == "service_instances":
		return "instance"
	case len(parts) == 3 && parts[0] == "service_instances" && parts[2] == "last_operation":
		return "instance_last_operation"
	case len(parts) == 4 && parts[0] == "service_instances" && parts[2] == "service_bindings":
		return "binding"
	case len(parts) == 5 && parts[0] == "service_instances" && parts[2] == "service_bindings" && parts[4] == "last_operation":
		return "binding_last_operation"
	}
	return "other"
}
