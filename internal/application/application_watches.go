package application

import (
	"bytes"
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Indexes of the cached Applications (AddIndexers).
const (
	indexCluster = "cluster"
	indexProject = "project"
)

func indexApplications(ctx context.Context, c cache.Cache) (toolscache.Indexer, error) {
	indexes := map[string]func(*argocd.Application) string{
		indexCluster: func(a *argocd.Application) string { return argocd.ManagedCluster(a) },
		indexProject: (*argocd.Application).Project,
	}
	indexers := toolscache.Indexers{}
	for name, fn := range indexes {
		indexers[name] = func(obj any) ([]string, error) {
			if app, ok := obj.(*argocd.Application); ok {
				if v := fn(app); v != "" {
					return []string{v}, nil
				}
			}
			return nil, nil
		}
	}
	return AddIndexers(ctx, c, indexers)
}

// applicationChanged passes Application events except updates that only bring the status this controller
// wrote last (its own writes, seen by the cache) or change nothing at all (a resync). Any other status-only
// update is reconciled: a status someone else wrote, or an earlier write of this controller that a later one
// has overtaken; the hub then ends with the managed cluster's status whatever order the cache sees writes in.
func (r *Reconciler) applicationChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*argocd.Application), e.ObjectNew.(*argocd.Application)
			hash := n.StatusSummary().Hash
			own := r.statuses.observed(client.ObjectKeyFromObject(n).String(), n.ResourceVersion, hash, r.clock())
			return specChanged(o, n) || (!own && hash != o.StatusSummary().Hash)
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			key := client.ObjectKeyFromObject(e.Object).String()
			r.statuses.forget(key)
			r.operationEnds.forget(key)
			r.built.forget(key)
			// An Application seen with a deletion timestamp leaves the cache for good: unless it still has
			// argocd-pull's finalizer to remove, its reconcile need not ask the hub whether it still exists.
			if !e.DeleteStateUnknown && !e.Object.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(e.Object, Finalizer) {
				r.gone.add(key)
			}
			return true
		},
	}
}

// specChanged reports whether an update changed more than the status.
func specChanged(o, n *argocd.Application) bool {
	return !reflect.DeepEqual(o.GetLabels(), n.GetLabels()) ||
		!reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) ||
		!reflect.DeepEqual(o.GetFinalizers(), n.GetFinalizers()) ||
		!reflect.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) ||
		o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero() ||
		!bytes.Equal(o.Spec, n.Spec) ||
		!bytes.Equal(o.Operation, n.Operation)
}

// worksSource delivers the works' events and, unlike source.Informer, holds the controller's workers until the
// transport has all the works: a reconcile that ran before would take existing works for missing ones.
type worksSource struct {
	source.Informer
}

var _ source.SyncingSource = (*worksSource)(nil)

// WaitForSync waits until the transport has its works.
func (s *worksSource) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.Informer.Informer.HasSynced) {
		return fmt.Errorf("wait for the works: %w", context.Cause(ctx))
	}
	return nil
}

// workToApplication maps a work to its hub Application.
func workToApplication(_ context.Context, o client.Object) []reconcile.Request {
	w, ok := o.(*workv1.ManifestWork)
	if !ok {
		return nil
	}
	key := workclient.ApplicationKey(w)
	if key == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{
		Namespace: w.Annotations[argocd.AnnotationHubAppNamespace], Name: w.Annotations[argocd.AnnotationHubAppName],
	}}}
}

// placementDecisionHandler requeues the Applications of the namespace that target a cluster the decision
// selects, or selected before the change.
func (r *Reconciler) placementDecisionHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], pds ...client.Object) {
		for _, o := range pds {
			pd, ok := o.(*clusterv1beta1.PlacementDecision)
			if !ok {
				continue
			}
			for _, d := range pd.Status.Decisions {
				for _, req := range r.applicationsBy(ctx, pd.Namespace, indexCluster, d.ClusterName) {
					q.Add(req)
				}
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

func (r *Reconciler) projectToApplications(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Options.HubArgoCDNamespace {
		return nil
	}
	return r.applicationsBy(ctx, "", indexProject, o.GetName())
}

func (r *Reconciler) clusterToApplications(ctx context.Context, o client.Object) []reconcile.Request {
	return r.applicationsBy(ctx, "", indexCluster, o.GetName())
}

// applicationsBy returns the Applications of a namespace (all namespaces when empty) with an index value.
func (r *Reconciler) applicationsBy(ctx context.Context, namespace, index, value string) []reconcile.Request {
	apps, err := r.apps.ByIndex(index, value)
	if err != nil {
		log.FromContext(ctx).Error(err, "List applications by index", "index", index, "value", value)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(apps))
	for _, o := range apps {
		app, ok := o.(*argocd.Application)
		if !ok || (namespace != "" && app.Namespace != namespace) {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: app.Namespace, Name: app.Name}})
	}
	return reqs
}

// clusterLabelsChanged passes ManagedCluster events that can change whether a cluster is the local cluster, or
// where its works are (workclient's transport labels).
func clusterLabelsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		for _, l := range []string{argocd.LabelLocalCluster, workclient.LabelTransport, workclient.LabelCopyTo, workclient.LabelRetire} {
			if e.ObjectOld.GetLabels()[l] != e.ObjectNew.GetLabels()[l] {
				return true
			}
		}
		return false
	}}
}
