package reconcilequeue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/argocd-pull/argocd-pull/internal/reconcilequeue"
)

// TestControllerStopsWhileItemsAreReady stops a controller whose workers are busy with items that come back at
// once, again and again: the moment of the stop finds items ready and workers between two reconciles. Each
// time its Start must return soon after its context ends. With the priority queue of controller-runtime v0.23
// (UsePriorityQueue true) the workers hang in the queue's Done within a few rounds.
func TestControllerStopsWhileItemsAreReady(t *testing.T) {
	const rounds, items = 50, 200
	for round := range rounds {
		requeue := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, fmt.Errorf("again")
		})
		opts, err := reconcilequeue.Options(controller.Options{
			Reconciler:              requeue,
			MaxConcurrentReconciles: 20,
			SkipNameValidation:      ptr.To(true),
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](0, 0),
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := controller.NewUnmanaged("stop", opts)
		if err != nil {
			t.Fatal(err)
		}
		fill := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			for i := range items {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: fmt.Sprint(i)}})
			}
			return nil
		})
		if err := c.Watch(fill); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Start(ctx) }()
		time.Sleep(10 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the controller did not stop within 10s of its context's end", round)
		}
	}
}

// TestControllersWaitForTheirSources: a controller waits for its sources to sync for as long as they take, not
// controller-runtime's default of two minutes after which the process would exit and the next one list
// everything again, unless it asks for a timeout of its own.
func TestControllersWaitForTheirSources(t *testing.T) {
	opts, err := reconcilequeue.Options(controller.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.CacheSyncTimeout != reconcilequeue.CacheSyncTimeout || opts.CacheSyncTimeout < 100*365*24*time.Hour {
		t.Errorf("a controller waits %s for its sources, want %s", opts.CacheSyncTimeout, reconcilequeue.CacheSyncTimeout)
	}
	if opts, err = reconcilequeue.Options(controller.Options{CacheSyncTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if opts.CacheSyncTimeout != time.Minute {
		t.Errorf("a controller asking to wait 1m waits %s", opts.CacheSyncTimeout)
	}
}
