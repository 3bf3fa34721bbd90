package console

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the console's Prometheus metrics; the server registers them on its registry (Collectors).
type metrics struct {
	sessions  prometheus.Gauge
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	cacheHits prometheus.Counter
	refused   *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_console_streams",
			Help: "Agents' console streams open on this instance."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_console_requests_total",
			Help: "Requests sent to agents over their console stream, by kind."}, []string{"kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "argocd_pull_console_request_duration_seconds",
			Help:    "Time from a request to an agent to its (first) answer, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"kind"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "argocd_pull_console_answer_cache_hits_total",
			Help: "Cache entries answered from the answers held briefly, without asking the agent."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_console_refused_total",
			Help: "Requests refused at the hub, by door (redis, kube) and reason."}, []string{"door", "reason"}),
	}
}

// Collectors are the console's metrics, for the server's registry.
func (h *Hub) Collectors() []prometheus.Collector {
	m := h.metrics
	return []prometheus.Collector{m.sessions, m.requests, m.latency, m.cacheHits, m.refused}
}
