// Package reconcilequeue sets the work queue of the hub reconcilers: client-go's rate-limited queue rather than
// controller-runtime's priority queue, the default since v0.22. In the v0.23 this module is pinned to, the priority
// queue can deadlock on ShutDown (controller-runtime#3538, fixed by #3540 in v0.25): it hands a ready item to a
// worker that has already returned and blocks holding its locks, so every worker that finishes a reconcile then
// waits in Done forever and the manager stops only when its 30 s grace period runs out. Back it out when
// controller-runtime is at v0.25 or later.
package reconcilequeue

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options returns o with the queue set. The rate limiter is the one the priority queue had, a per-item
// exponential back-off: client-go's default adds an overall 10 per second that a burst of conflicts would
// exhaust.
func Options(o controller.Options) controller.Options {
	o.UsePriorityQueue = ptr.To(false)
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)
	}
	return o
}
