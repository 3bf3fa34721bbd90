// Package reconcilequeue sets what every hub reconciler runs with: how long it waits for its sources, and its work
// queue, client-go's rate-limited queue rather than controller-runtime's priority queue, the default since v0.22.
// In the v0.23 this module is pinned to, the priority queue can deadlock on ShutDown (controller-runtime#3538,
// fixed by #3540 in v0.25): it hands a ready item to a worker that has already returned and blocks holding its
// locks, so every worker that finishes a reconcile then waits in Done forever and the manager stops only when its
// 30 s grace period runs out. Back the queue out when controller-runtime is at v0.25 or later.
package reconcilequeue

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// CacheSyncTimeout is how long a controller waits for its sources to sync before it gives up and the process
// exits: for ever. A controller's own sources start once the manager's caches have synced, and
// controller-runtime's default of two minutes for them is shorter than a list takes on a loaded hub: at 150,000
// Applications with the watch cache on, the restarted controller listed its Applications for 16 minutes and
// exited with status 1 two minutes after (2026-11-30), and a restarted Pod would have listed them all again. The
// grpc transport has its works when the server answers, whenever that is. A source that cannot sync (its RBAC,
// say) keeps the process waiting, not ready, its informer logging why.
const CacheSyncTimeout = 100 * 365 * 24 * time.Hour

// Options returns o with the queue set, and CacheSyncTimeout unless o has its own. The rate limiter is the one
// the priority queue had, a per-item exponential back-off: client-go's default adds an overall 10 per second that
// a burst of conflicts would exhaust. The queue's metrics are controller-runtime's, on the manager's metrics
// endpoint.
func Options(o controller.Options) (controller.Options, error) {
	provider, err := metricsProvider()
	if err != nil {
		return o, err
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = CacheSyncTimeout
	}
	o.UsePriorityQueue = ptr.To(false)
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)
	}
	o.NewQueue = func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
			Name: name, MetricsProvider: provider,
		})
	}
	return o, nil
}

// queueMetrics is the workqueue metrics of controller-runtime's registry. Its queues other than the priority
// queue report through client-go's process-wide provider, which the first package to set it owns: in
// argocd-pull's binary Kubernetes' component-base, whose metrics the manager's endpoint does not serve. So the
// queues are given the provider explicitly.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var metricsProvider = sync.OnceValues(func() (workqueue.MetricsProvider, error) {
	var errs []error
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return registered(prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: crmetrics.WorkQueueSubsystem, Name: name, Help: help}, labels), &errs)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return registered(prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: crmetrics.WorkQueueSubsystem, Name: name, Help: help},
			[]string{"name", "controller"}), &errs)
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return registered(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: crmetrics.WorkQueueSubsystem, Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		}, []string{"name", "controller"}), &errs)
	}
	// The names, help texts and labels are controller-runtime's (its pkg/internal/metrics): the registry hands
	// back the collectors it registered under them.
	m := &queueMetrics{
		depth: gauge(crmetrics.DepthKey, "Current depth of workqueue by workqueue and priority", "name", "controller", "priority"),
		unfinished: gauge(crmetrics.UnfinishedWorkKey, "How many seconds of work has been done that "+
			"is in progress and hasn't been observed by work_duration. Large "+
			"values indicate stuck threads. One can deduce the number of stuck "+
			"threads by observing the rate at which this increases.", "name", "controller"),
		longest: gauge(crmetrics.LongestRunningProcessorKey, "How many seconds has the longest running "+
			"processor for workqueue been running.", "name", "controller"),
		adds:    counter(crmetrics.AddsKey, "Total number of adds handled by workqueue"),
		retries: counter(crmetrics.RetriesKey, "Total number of retries handled by workqueue"),
		latency: histogram(crmetrics.QueueLatencyKey, "How long in seconds an item stays in workqueue before being requested"),
		work:    histogram(crmetrics.WorkDurationKey, "How long in seconds processing an item from workqueue takes."),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register the work queues' metrics: %w", err)
	}
	return m, nil
})

// registered registers c with controller-runtime's registry and returns it, or the collector registered
// before it under the same description.
func registered[C prometheus.Collector](c C, errs *[]error) C {
	err := crmetrics.Registry.Register(c)
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if err != nil {
		*errs = append(*errs, err)
	}
	return c
}

func (m *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name, name, "")
}

func (m *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name, name)
}

func (m *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name, name)
}

func (m *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name, name)
}

func (m *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name, name)
}

func (m *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name, name)
}

func (m *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name, name)
}
