// Package gitopscluster registers the managed clusters an OCM Placement selects with Argo CD: for each
// GitOpsCluster it keeps one Argo CD cluster secret (without credentials) per selected cluster in the Argo CD
// namespace, and the ocm-placement-generator ConfigMap through which ApplicationSets' clusterDecisionResource
// generator reads the PlacementDecisions. It owns only the secrets and the
// ConfigMap it labels as its own; Placements and PlacementDecisions belong to OCM's placement controller.
package gitopscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
)

const (
	// Finalizer keeps a GitOpsCluster until the cluster secrets it created are gone.
	Finalizer = "argocd-pull.io/gitopscluster-cleanup"
	// FieldOwner is the field manager of every write the controller makes.
	FieldOwner = "argocd-pull-gitopscluster"
	// ControllerName names the controller, its logger and its events.
	ControllerName = "gitopscluster"
	// defaultConflictRecheck is how often a name clash with a Secret outside the watched cache is checked again.
	defaultConflictRecheck = 2 * time.Minute
)

// Reconciler keeps the Argo CD cluster secrets of each GitOpsCluster in step with its Placement's decisions.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the hub. Defaults to the manager's client.
	Client client.Client
	// APIReader reads from the hub directly, to classify a name clash with a Secret outside the cache.
	// Defaults to the manager's API reader.
	APIReader client.Reader
	// Recorder records events on GitOpsClusters. Defaults to the manager's recorder for ControllerName.
	Recorder events.EventRecorder
	// now is the clock; time.Now when nil.
	now func() time.Time
	// conflictRecheck overrides defaultConflictRecheck when set.
	conflictRecheck time.Duration
}

// +kubebuilder:rbac:groups=apps.open-cluster-management.io,resources=gitopsclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps.open-cluster-management.io,resources=gitopsclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups=apps.open-cluster-management.io,resources=gitopsclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=placements;placementdecisions;managedclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile registers one GitOpsCluster's clusters with Argo CD.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gc := &v1alpha1.GitOpsCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, gc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get gitopscluster %s: %w", req.NamespacedName, err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("gitOpsCluster", klog.KObj(gc)))

	if !gc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, gc)
	}
	if err := r.ensureFinalizer(ctx, gc); err != nil {
		return ctrl.Result{}, err
	}

	obs := observation{generation: gc.Generation, argoNamespace: gc.ArgoNamespace(), ignored: ignoredFields(&gc.Spec)}
	for _, step := range []func(context.Context, *v1alpha1.GitOpsCluster, *observation) error{
		r.resolvePlacement,
		r.checkArgoNamespace,
		r.syncConsole,
		r.syncSecrets,
		r.syncGeneratorConfigMap,
	} {
		// A step fails only when it cannot read what it observes; the status is then left as it was.
		if err := step(ctx, gc, &obs); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.updateStatus(ctx, gc, obs); err != nil {
		return ctrl.Result{}, err
	}
	recheck := defaultConflictRecheck
	if r.conflictRecheck > 0 {
		recheck = r.conflictRecheck
	}
	return result(obs, recheck)
}

// result turns what a reconcile observed into its outcome: failed writes are retried with backoff, bad input
// waits for the watch that reports its fix, and a clash with a Secret outside the cache is checked again later.
func result(obs observation, conflictRecheck time.Duration) (ctrl.Result, error) {
	reg := obs.registration
	switch {
	case len(reg.failures) > 0:
		return ctrl.Result{}, fmt.Errorf("register clusters: %s", summarize(reg.failures))
	case !obs.configMap.ok && obs.configMap.reason == v1alpha1.ReasonGeneratorConfigMapFailed:
		return ctrl.Result{}, errors.New(obs.configMap.message)
	case reg.uncachedConflict:
		return ctrl.Result{RequeueAfter: conflictRecheck}, nil
	case !obs.placement.resolved:
		return ctrl.Result{}, reconcile.TerminalError(errors.New(obs.placement.message))
	case !obs.argoNamespaceFound:
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("argo cd namespace %s not found", obs.argoNamespace))
	case len(reg.conflicts) > 0:
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("name conflicts: %s", summarize(reg.conflicts)))
	case !obs.configMap.ok:
		return ctrl.Result{}, reconcile.TerminalError(errors.New(obs.configMap.message))
	case obs.console.requested && obs.console.reason == v1alpha1.ReasonConsoleCertificatesFailed:
		return ctrl.Result{}, errors.New(obs.console.message)
	case obs.console.requested && !obs.console.ok && obs.argoNamespaceFound:
		return ctrl.Result{}, reconcile.TerminalError(errors.New(obs.console.message))
	case !obs.consoleRenewAt.IsZero():
		// Certificates are issued again before they expire, however quiet the GitOpsCluster is.
		return ctrl.Result{RequeueAfter: min(max(time.Until(obs.consoleRenewAt), time.Minute), 24*time.Hour)}, nil
	}
	return ctrl.Result{}, nil
}

// checkArgoNamespace observes whether the Argo CD namespace exists and is not being deleted.
func (r *Reconciler) checkArgoNamespace(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs *observation) error {
	ns := &corev1.Namespace{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: obs.argoNamespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		obs.argoNamespaceFound = false
	case err != nil:
		return fmt.Errorf("get namespace %s: %w", obs.argoNamespace, err)
	default:
		obs.argoNamespaceFound = ns.DeletionTimestamp.IsZero()
	}
	return nil
}

func (r *Reconciler) ensureFinalizer(ctx context.Context, gc *v1alpha1.GitOpsCluster) error {
	if controllerutil.ContainsFinalizer(gc, Finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(gc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(gc, Finalizer)
	if err := r.Client.Patch(ctx, gc, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("add finalizer to gitopscluster %s: %w", ownerKey(gc), err)
	}
	return nil
}

// updateStatus writes the status computed from obs in one patch, if it changed, and records the events of
// the change.
func (r *Reconciler) updateStatus(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs observation) error {
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	next, changed := computeStatus(gc.Status, obs, metav1.NewTime(now()))
	evs := statusEvents(gc.Status.Conditions, next.Conditions, obs.registration)
	if changed {
		// The whole status in one merge patch: every field is computed, and zero counts must be written too.
		body, err := json.Marshal(map[string]any{"status": next})
		if err != nil {
			return fmt.Errorf("encode status of gitopscluster %s: %w", ownerKey(gc), err)
		}
		if err := r.Client.Status().Patch(ctx, gc, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("patch status of gitopscluster %s: %w", ownerKey(gc), err)
		}
	}
	for _, e := range evs {
		r.Recorder.Eventf(gc, nil, e.eventType, e.reason, "Reconcile", "%s", e.note)
	}
	return nil
}

// reconcileDelete removes the cluster secrets gc created (handing each to another GitOpsCluster that registers
// the same cluster with the same Argo CD, so Argo CD never forgets it) and the generator ConfigMap if no other
// GitOpsCluster uses it, then releases the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, gc *v1alpha1.GitOpsCluster) error {
	if !controllerutil.ContainsFinalizer(gc, Finalizer) {
		return nil
	}
	owned, err := r.secretsToRelease(ctx, gc)
	if err != nil {
		return err
	}
	argoNamespace := gc.ArgoNamespace()
	in := planInput{gc: gc, argoNamespace: argoNamespace, owned: owned, ownerExists: r.gitOpsClusterExists(ctx)}
	if in.successors, err = r.successors(ctx, gc, argoNamespace); err != nil {
		return err
	}
	clusters := make([]string, 0, len(owned))
	for i := range owned {
		clusters = append(clusters, secretCluster(&owned[i]))
	}
	if in.clusterLabels, err = r.clusterLabels(ctx, clusters); err != nil {
		return err
	}
	var reg registration
	r.applySecretPlan(ctx, in, planSecrets(in), &reg)
	if len(reg.failures) > 0 {
		return fmt.Errorf("release cluster secrets of gitopscluster %s: %s", ownerKey(gc), summarize(reg.failures))
	}
	if err := r.releaseGeneratorConfigMap(ctx, gc); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(gc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(gc, Finalizer)
	if err := r.Client.Patch(ctx, gc, patch, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from gitopscluster %s: %w", ownerKey(gc), err)
	}
	log.FromContext(ctx).Info("Released cluster secrets", "removed", reg.removed, "handedOver", reg.handedOver)
	return nil
}

// secretsToRelease returns the secrets gc owns: those in the cache, and those in the Argo CD namespace that
// the API server has and the cache may not have seen yet.
func (r *Reconciler) secretsToRelease(ctx context.Context, gc *v1alpha1.GitOpsCluster) ([]corev1.Secret, error) {
	owned, err := r.ownedSecrets(ctx, gc)
	if err != nil {
		return nil, err
	}
	seen := map[client.ObjectKey]bool{}
	for i := range owned {
		seen[client.ObjectKeyFromObject(&owned[i])] = true
	}
	live := &corev1.SecretList{}
	if err := r.APIReader.List(ctx, live, client.InNamespace(gc.ArgoNamespace()),
		client.MatchingLabels{LabelSecretType: SecretTypeCluster}); err != nil {
		return nil, fmt.Errorf("list cluster secrets in namespace %s: %w", gc.ArgoNamespace(), err)
	}
	for i := range live.Items {
		if s := &live.Items[i]; secretOwner(s) == ownerKey(gc) && !seen[client.ObjectKeyFromObject(s)] {
			owned = append(owned, *s)
		}
	}
	return owned, nil
}
