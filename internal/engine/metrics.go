package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	inFlight      *prometheus.GaugeVec
	duration      *prometheus.HistogramVec
	takeovers     prometheus.Counter
	leaseLost     prometheus.Counter
	leaseRenewals prometheus.Counter
	calls         *prometheus.CounterVec
	retries       *prometheus.CounterVec
	queueDepth    prometheus.Gauge
	queueWait     prometheus.Histogram
	queueOldest   prometheus.GaugeFunc
	budget        *prometheus.CounterVec
}

// newMetrics makes the engine's metrics; oldest reports the age of the
// work queue's oldest entry.
func newMetrics(reg prometheus.Registerer, oldest func() float64) (*metrics, error) {
	m := &metrics{
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bucketbroker_operations_in_flight",
			Help: "Operations being driven by this process, by type.",
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bucketbroker_operation_duration_seconds",
			Help:    "Time to drive an operation to its end, by type and final state.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"type", "state"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_lease_takeovers_total",
			Help: "Operations this process took over from another replica whose lease had run out.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_leases_lost_total",
			Help: "Operations whose worker this process stopped because their lease was taken over or could not be renewed in time.",
		}),
		leaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_lease_renewals_total",
			Help: "Lease renewals written while a worker drove an operation.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bucketbroker_backend_calls_total",
			Help: "Backend calls made by the operations' steps (each attempt once), by step and result: ok or error.",
		}, []string{"step", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bucketbroker_backend_retries_total",
			Help: "Backend calls that failed and were tried again, by step.",
		}, []string{"step"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bucketbroker_work_queue_depth",
			Help: "Operations waiting for one of the engine's workers.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bucketbroker_work_queue_wait_seconds",
			Help:    "Time an operation waited in the queue for a worker.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		queueOldest: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bucketbroker_work_queue_oldest_seconds",
			Help: "Age of the operation that has waited longest in the queue for a worker (0: none waits).",
		}, oldest),
	}
	m.budget = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bucketbroker_sync_budget_answers_total",
		Help: "Requests with accepts_incomplete=true that waited the sync budget, by operation type and answer: finished (answered as synchronous) or accepted (202, still running).",
	}, []string{"type", "answer"})
	for _, t := range []OpType{OpProvision, OpUpdate, OpDeprovision, OpBind, OpUnbind} {
		m.inFlight.WithLabelValues(string(t)) // show zero before the first operation
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.inFlight, m.duration, m.takeovers, m.leaseLost, m.leaseRenewals,
			m.calls, m.retries, m.queueDepth, m.queueWait, m.queueOldest, m.budget} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	return m, nil
}
