package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/status"
)

// Endpoint labels.
const (
	endpointSource = "source"
	endpointAgent  = "agent"
)

// metrics are the server's Prometheus metrics, on a registry of their own so that several servers can
// run in one process.
type metrics struct {
	registry         *prometheus.Registry
	connectedAgents  prometheus.Gauge
	connectedSources prometheus.Gauge
	eventsIn         *prometheus.CounterVec
	eventsOut        *prometheus.CounterVec
	rejected         *prometheus.CounterVec
	resyncs          *prometheus.CounterVec
	dbDuration       *prometheus.HistogramVec
	undelivered      prometheus.Gauge
	stuckDeletes     prometheus.Gauge
	republished      prometheus.Counter
	instances        prometheus.Gauge
	streamResets     prometheus.Counter
	unresynced       prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		connectedAgents: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_server_connected_agents",
			Help: "Agent subscriptions open on this instance."}),
		connectedSources: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_server_connected_sources",
			Help: "Source subscriptions open on this instance."}),
		eventsIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_server_events_received_total",
			Help: "Events accepted, by endpoint and type (subresource.action)."}, []string{"endpoint", "type"}),
		eventsOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_server_events_sent_total",
			Help: "Events sent to subscribers, by endpoint and type (subresource.action)."}, []string{"endpoint", "type"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_server_events_rejected_total",
			Help: "Publish and subscribe requests rejected, by endpoint and gRPC code."}, []string{"endpoint", "code"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_server_resyncs_total",
			Help: "Resync requests answered, by endpoint."}, []string{"endpoint"}),
		dbDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "argocd_pull_server_db_duration_seconds",
			Help: "Duration of database operations.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)},
			[]string{"operation", "result"}),
		undelivered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_server_undelivered_works",
			Help: "Specs without a status for their current version after the undelivered threshold."}),
		stuckDeletes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_server_stuck_deletes",
			Help: "Works marked for deletion for longer than the stuck-delete threshold."}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{Name: "argocd_pull_server_republished_total",
			Help: "Undelivered specs published again."}),
		instances: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argocd_pull_server_instances",
			Help: "Live server instances sharing the database."}),
		streamResets: prometheus.NewCounter(prometheus.CounterOpts{Name: "argocd_pull_server_stream_resets_total",
			Help: "Times every subscription was closed to make clients resync, after the database feed was interrupted."}),
		unresynced: prometheus.NewCounter(prometheus.CounterOpts{Name: "argocd_pull_server_agents_without_resync_total",
			Help: "Agent subscriptions that sent no spec resync within --agent-resync-grace; their connections were closed."}),
	}
	m.registry.MustRegister(m.connectedAgents, m.connectedSources, m.eventsIn, m.eventsOut, m.rejected, m.resyncs,
		m.dbDuration, m.undelivered, m.stuckDeletes, m.republished, m.instances, m.streamResets, m.unresynced,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeDB(op string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.dbDuration.WithLabelValues(op, result).Observe(d.Seconds())
}

func (m *metrics) reject(endpoint string, err error) {
	m.rejected.WithLabelValues(endpoint, status.Code(err).String()).Inc()
}
