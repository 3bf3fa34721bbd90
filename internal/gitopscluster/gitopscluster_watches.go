package gitopscluster

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/reconcilequeue"
)

// Cache indexes.
const (
	// indexArgoNamespace indexes GitOpsClusters by their Argo CD namespace.
	indexArgoNamespace = "gitopscluster.argoNamespace"
	// indexPlacement indexes GitOpsClusters by the namespace/name of the Placement they reference.
	indexPlacement = "gitopscluster.placement"
	// indexSecretOwner indexes Secrets by their AnnotationOwner.
	indexSecretOwner = "secret.gitopsclusterOwner" //nolint:gosec // an index name, not a credential
)

// AddToScheme adds the kinds the controller reads and writes to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, v1alpha1.AddToScheme, clusterv1.Install, clusterv1beta1.Install,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// CacheByObject returns the cache restrictions that keep the controller's memory bounded on a hub with many
// Secrets and ConfigMaps: only Argo CD cluster secrets (with every data key but name and server dropped, so no
// credentials of other cluster secrets are held) and only ConfigMaps named ocm-placement-generator. Pass them
// in the manager's cache.Options.ByObject; a controller in the same manager that needs other Secrets or
// ConfigMaps must read them with an uncached client.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Label:     labels.SelectorFromSet(labels.Set{LabelSecretType: SecretTypeCluster}),
			Transform: stripSecret,
		},
		&corev1.ConfigMap{}: {
			Field: fields.OneTermEqualSelector("metadata.name", GeneratorConfigMapName),
		},
	}
}

// stripSecret drops what the controller never reads from a cached Secret.
func stripSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	// A secret of a GitOpsCluster keeps its config: with the console on, it holds the cluster's console
	// credentials, which are kept from one reconcile to the next while they are fresh.
	owned := s.Annotations[AnnotationOwner] != ""
	for k := range s.Data {
		if k != "name" && k != "server" && (k != "config" || !owned) {
			delete(s.Data, k)
		}
	}
	s.StringData = nil
	s.ManagedFields = nil
	return s, nil
}

// SetupWithManager registers the reconciler, its cache indexes and its watches. The manager's scheme needs
// the kinds AddToScheme adds; Client, APIReader and Recorder default to the manager's.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	if err := indexFields(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	queue, err := reconcilequeue.Options(controller.Options{})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.GitOpsCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&clusterv1beta1.PlacementDecision{}, handler.EnqueueRequestsFromMapFunc(r.placementDecisionToGitOpsClusters)).
		Watches(&clusterv1beta1.Placement{}, handler.EnqueueRequestsFromMapFunc(r.placementToGitOpsClusters)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToGitOpsClusters),
			builder.WithPredicates(predicate.NewPredicateFuncs(isClusterSecret))).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.configMapToGitOpsClusters),
			builder.WithPredicates(predicate.NewPredicateFuncs(isGeneratorConfigMap))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToGitOpsClusters)).
		Watches(&clusterv1.ManagedCluster{}, handler.EnqueueRequestsFromMapFunc(r.managedClusterToGitOpsClusters),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(queue).
		Complete(r)
}

func indexFields(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.GitOpsCluster{}, indexArgoNamespace, func(obj client.Object) []string {
		return []string{obj.(*v1alpha1.GitOpsCluster).ArgoNamespace()}
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1alpha1.GitOpsCluster{}, indexPlacement, func(obj client.Object) []string {
		gc := obj.(*v1alpha1.GitOpsCluster)
		if gc.Spec.PlacementRef == nil || gc.Spec.PlacementRef.Name == "" {
			return nil
		}
		return []string{types.NamespacedName{Namespace: gc.Namespace, Name: gc.Spec.PlacementRef.Name}.String()}
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &corev1.Secret{}, indexSecretOwner, func(obj client.Object) []string {
		if owner := obj.GetAnnotations()[AnnotationOwner]; owner != "" {
			return []string{owner}
		}
		return nil
	})
}

func isClusterSecret(obj client.Object) bool {
	return obj.GetLabels()[LabelSecretType] == SecretTypeCluster
}

func isGeneratorConfigMap(obj client.Object) bool { return obj.GetName() == GeneratorConfigMapName }

// splitKey splits a "namespace/name" key.
func splitKey(key string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(key, "/")
	return namespace, name, ok && namespace != "" && name != ""
}

// gitOpsClustersWith returns a request for every GitOpsCluster whose indexed field has the value.
func (r *Reconciler) gitOpsClustersWith(ctx context.Context, field, value string) []reconcile.Request {
	list := &v1alpha1.GitOpsClusterList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{field: value}); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list GitOpsClusters to enqueue", "field", field, "value", value)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func (r *Reconciler) placementDecisionToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	placement := obj.GetLabels()[clusterv1beta1.PlacementLabel]
	if placement == "" {
		return nil
	}
	return r.gitOpsClustersWith(ctx, indexPlacement, types.NamespacedName{Namespace: obj.GetNamespace(), Name: placement}.String())
}

func (r *Reconciler) placementToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.gitOpsClustersWith(ctx, indexPlacement, client.ObjectKeyFromObject(obj).String())
}

// secretToGitOpsClusters enqueues the GitOpsCluster that owns a cluster secret and every GitOpsCluster of the
// secret's Argo CD namespace, since any cluster secret there can clash with theirs or free a name.
func (r *Reconciler) secretToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	reqs := r.gitOpsClustersWith(ctx, indexArgoNamespace, obj.GetNamespace())
	if ns, name, ok := splitKey(obj.GetAnnotations()[AnnotationOwner]); ok {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
		if !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

func (r *Reconciler) configMapToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.gitOpsClustersWith(ctx, indexArgoNamespace, obj.GetNamespace())
}

func (r *Reconciler) namespaceToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.gitOpsClustersWith(ctx, indexArgoNamespace, obj.GetName())
}

// managedClusterToGitOpsClusters enqueues the owners of a cluster's secrets, which copy its labels.
func (r *Reconciler) managedClusterToGitOpsClusters(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &corev1.SecretList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{LabelSecretType: SecretTypeCluster, LabelClusterName: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list cluster secrets to enqueue", "managedCluster", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if ns, name, ok := splitKey(secretOwner(&list.Items[i])); ok {
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
			if !slices.Contains(reqs, req) {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}
