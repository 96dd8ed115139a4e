package osb

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are labeled by route pattern, never by raw path, and by a closed
// set of methods, so that no client can grow the label space.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// ready and readinessFailures record what each /readyz check found,
	// for alerts: a probe answers one kubelet, the metrics every scrape.
	ready             prometheus.Gauge
	readinessFailures *prometheus.CounterVec
	// children keeps the samples' children by label values once resolved
	// (sampleKey -> *sampleChildren): resolving hashes every label value
	// and formats the status code, a cost per request for a set of label
	// values that is small and closed. A child is only created by its first
	// sample, so /metrics shows only series that have had a sample.
	children sync.Map
}

type sampleKey struct {
	endpoint, method string
	status           int
}

type sampleChildren struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "bucketbroker",
			Subsystem: "http",
			Name:      "requests_total",
			Help:      "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"endpoint", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "bucketbroker",
			Subsystem: "http",
			Name:      "request_duration_seconds",
			Help:      "Time to answer an HTTP request, by route pattern and method.",
			// Synchronous provisions and binds wait for backend calls, so the
			// buckets reach past the default 10s.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"endpoint", "method"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bucketbroker_ready",
			Help: "1 when the last /readyz check passed, 0 when it failed (the process counts as ready until its first check).",
		}),
		readinessFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bucketbroker_readiness_failures_total",
			Help: "/readyz checks that failed, by what failed: store (unreachable, or unable to write), storage backend, upstream NAME, or other.",
		}, []string{"check"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	m.ready.Set(1)
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ready, m.readinessFailures} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register HTTP metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) observe(endpoint, method string, status int, d time.Duration) {
	k := sampleKey{endpoint, method, status}
	c, ok := m.children.Load(k)
	if !ok {
		c, _ = m.children.LoadOrStore(k, &sampleChildren{
			requests: m.requests.WithLabelValues(endpoint, method, strconv.Itoa(status)),
			duration: m.duration.WithLabelValues(endpoint, method),
		})
	}
	sc := c.(*sampleChildren)
	sc.requests.Inc()
	sc.duration.Observe(d.Seconds())
}

// observeReadiness records one /readyz check: err is its failure, nil
// when it passed.
func (m *metrics) observeReadiness(err error) {
	if err == nil {
		m.ready.Set(1)
		return
	}
	m.ready.Set(0)
	check := "other"
	if ce := (*CheckError)(nil); errors.As(err, &ce) {
		check = ce.Check
	}
	m.readinessFailures.WithLabelValues(check).Inc()
}

// metricMethod maps a request method onto a closed set.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodPost, http.MethodOptions:
		return m
	}
	return "OTHER"
}
