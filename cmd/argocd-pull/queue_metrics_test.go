package main

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/argocd-pull/argocd-pull/internal/reconcilequeue"
)

// TestQueueMetrics: a hub reconciler's queue reports its depth and adds where controller-runtime's queues do, in the
// registry the manager's metrics endpoint serves, under the controller's name. It runs here because what it guards
// depends on the binary's packages: client-go's process-wide queue metrics belong to the first package that sets
// them, in this binary Kubernetes' component-base, not controller-runtime.
func TestQueueMetrics(t *testing.T) {
	opts, err := reconcilequeue.Options(controller.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := opts.NewQueue("metered", opts.RateLimiter)
	defer q.ShutDown()
	for i := range 3 {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: fmt.Sprint(i)}})
	}
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["name"] == "metered" && labels["controller"] == "metered" {
				got[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	if got["workqueue_depth"] != 3 || got["workqueue_adds_total"] != 3 {
		t.Errorf("metrics of the queue %v, want a depth of 3 and 3 adds", got)
	}
}
