package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// newRegistry returns the fleet's Prometheus metrics, on a registry of their own so that several fleets can
// run in one process. The counters read the fleet's own counts (see Stats).
func (f *Fleet) newRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	counter := func(name, help string, read func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(read()) })
	}
	gauge := func(name, help string, read func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(read()) })
	}
	f.errorsBy = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argocd_pull_sim_errors_total",
		Help: "Failed attempts to process a work (retried), and console errors, by reason: conflict, notfound, unreachable, console, other."}, []string{"reason"})
	r.MustRegister(
		counter("argocd_pull_sim_works_applied_total", "Work generations applied and reported Applied.", f.applied.Load),
		counter("argocd_pull_sim_status_updates_total", "Work statuses sent, Applied ones included.", f.statusUpdates.Load),
		counter("argocd_pull_sim_deletions_total", "Works whose deletion completed on a simulated cluster.", f.deletions.Load),
		counter("argocd_pull_sim_churn_changes_total", "Random status changes made by churn.", f.churnChanges.Load),
		gauge("argocd_pull_sim_clusters", "Simulated clusters.", func() int64 { return int64(len(f.clusters)) }),
		gauge("argocd_pull_sim_clusters_connected", "Simulated clusters connected to the transport.",
			func() int64 { return int64(f.tr.connected()) }),
		gauge("argocd_pull_sim_works", "Works held by the simulated clusters.", f.works.Load),
		gauge("argocd_pull_sim_applications", "Simulated Applications.", f.apps.Load),
		gauge("argocd_pull_sim_applications_synced_healthy", "Simulated Applications last reported Synced and Healthy.",
			f.syncedHealthy.Load),
		f.errorsBy,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// serveMetrics serves /metrics, /healthz and the extra handlers on addr until ctx ends. It returns the address
// it listens on.
func serveMetrics(ctx context.Context, addr string, r *prometheus.Registry, extra map[string]http.Handler) (string, func(), error) {
	logger := klog.FromContext(ctx)
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s for metrics: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	for path, h := range extra {
		mux.Handle(path, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Serve metrics; the simulator goes on without them", "address", addr)
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return l.Addr().String(), stop, nil
}
