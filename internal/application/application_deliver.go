package application

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// state is what one reconcile of an Application learns, step by step.
type state struct {
	app *argocd.Application
	// payload is the Application as an unstructured object, for the work builder.
	payload *unstructured.Unstructured
	cluster string
	project *unstructured.Unstructured
	// conditions are the problems found on the hub side (bad input, unknown or forbidden cluster).
	conditions []appstatus.Condition
	// frozen is set by bad input: nothing more is delivered and existing works are left as they are, so
	// that a mistake on the hub never removes an Application from a managed cluster.
	frozen bool
	// desired is the work the Application should have, and desiredHash its spec hash; work is the one that
	// exists (from the cache). When the work exists as it would be built (builtWorks), desired is not built:
	// only its hash is known.
	desired     *workv1.ManifestWork
	desiredHash string
	work        *workv1.ManifestWork
	// move is where the cluster's works are, while it moves between transports (checkMove).
	move workclient.Move
	// refreshCovered: the Application's refresh is covered by one handed off moments ago; it is not delivered,
	// only cleared on the hub.
	refreshCovered bool
	// delivered is what the work reports (readDelivery), read once per reconcile; deliveredFrom is that work.
	delivered     appstatus.Delivery
	deliveredFrom *workv1.ManifestWork
}

// readDelivery returns what a work reports of the delivery and of the Application, read once per reconcile for
// the hand-off and the status: reading it decodes the Application's status from the work's feedback, a fifth
// of a restarted controller's CPU and allocations while it catches up.
func (r *Reconciler) readDelivery(s *state, work *workv1.ManifestWork) appstatus.Delivery {
	if s.deliveredFrom != work {
		s.delivered = appstatus.FromWork(work, appstatus.Options{Now: r.clock(), ApplyTimeout: r.Options.ApplyTimeout})
		s.deliveredFrom = work
	}
	return s.delivered
}

func (s *state) problem(conditionType, format string, args ...any) {
	s.conditions = append(s.conditions, appstatus.Condition{Type: conditionType, Message: fmt.Sprintf(format, args...)})
	s.frozen = true
}

// validate checks what the Application asks for against the hub: a cluster, a valid spoke namespace, a
// cluster that may receive it, an AppProject that exists.
func (r *Reconciler) validate(ctx context.Context, s *state) (ctrl.Result, error) {
	s.cluster = argocd.ManagedCluster(s.app)
	if s.cluster == "" {
		s.problem(argocd.ConditionInvalidSpec, "annotation %s is missing or empty: the Application names no managed cluster",
			argocd.AnnotationManagedCluster)
		return ctrl.Result{}, nil
	}
	if _, err := SpokeNamespace(s.app); err != nil {
		s.problem(argocd.ConditionInvalidSpec, "%v", err)
		return ctrl.Result{}, nil
	}
	if r.checkMove(ctx, s); s.frozen {
		return ctrl.Result{}, nil
	}
	if !r.Options.EnableLocalCluster {
		mc := &clusterv1.ManagedCluster{}
		err := r.Client.Get(ctx, client.ObjectKey{Name: s.cluster}, mc)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get managedcluster %s: %w", s.cluster, err)
		}
		if err == nil && mc.Labels[argocd.LabelLocalCluster] == "true" {
			s.problem(argocd.ConditionDeliveryWarning,
				"cluster %s is the hub itself (label %s=true); delivery to it is turned off (--enable-local-cluster)",
				s.cluster, argocd.LabelLocalCluster)
			return ctrl.Result{}, nil
		}
	}
	if r.Options.TenancyGate {
		ok, err := r.clusterPermitted(s.app.GetNamespace(), s.cluster)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !ok {
			s.problem(argocd.ConditionClusterNotPermitted,
				"no PlacementDecision in namespace %s selects cluster %s: an Application may only target clusters placed for its namespace",
				s.app.GetNamespace(), s.cluster)
			return ctrl.Result{}, nil
		}
	}
	if name := s.app.Project(); name != argocd.DefaultProject {
		proj := argocd.NewAppProject()
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Options.HubArgoCDNamespace, Name: name}, proj)
		if apierrors.IsNotFound(err) {
			s.problem(argocd.ConditionInvalidSpec, "AppProject %s does not exist in namespace %s on the hub", name, r.Options.HubArgoCDNamespace)
			return ctrl.Result{}, nil
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("get appproject %s/%s: %w", r.Options.HubArgoCDNamespace, name, err)
		}
		s.project = proj
	}
	return ctrl.Result{}, nil
}

// deliver builds the work and applies it when it differs from the one that exists.
func (r *Reconciler) deliver(ctx context.Context, s *state) (ctrl.Result, error) {
	name, err := r.workName(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	existing, err := r.Works.Get(ctx, s.cluster, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("get work %s/%s: %w", s.cluster, name, err)
	}
	if err == nil {
		s.work = existing
	}
	appKey := client.ObjectKeyFromObject(s.app).String()
	if refresh, ok := s.app.GetAnnotations()[argocd.AnnotationRefresh]; ok &&
		r.refreshes.covered(appKey, refresh == refreshHard, r.clock()) {
		s.refreshCovered = true
	}
	baseline := operationBaseline(s.app, s.work)
	// validate fetched the AppProject unless it is the default one.
	project, projectVersion := "", ""
	if s.project != nil {
		project, projectVersion = s.project.GetName(), s.project.GetResourceVersion()
	}
	in := buildInput{cluster: s.cluster, workName: name, project: project, projectVersion: projectVersion,
		baseline: baseline, refreshCovered: s.refreshCovered}
	inputs := buildInputs(in)
	hash, known := r.built.hash(appKey, s.app.GetResourceVersion(), inputs)
	from := ""
	if !known && s.work != nil {
		// Not built by this process since the Application last changed (its status written, the process
		// restarted): the work says what it was built from.
		from = builtFrom(s.app, r.Options.SpokeArgoCDNamespace, in)
		if h := s.work.Annotations[AnnotationSpecHash]; h != "" && s.work.Annotations[AnnotationBuiltFrom] == from {
			hash, known = h, true
			r.built.record(appKey, s.app.GetResourceVersion(), inputs, hash)
		}
	}
	if known && s.work != nil && s.work.DeletionTimestamp.IsZero() && s.work.Annotations[AnnotationSpecHash] == hash &&
		s.move.CopyTo == "" && s.move.Retire == "" {
		// The work is what building it again would give; a move would need the work itself.
		s.desiredHash = hash
		r.expected.satisfied(s.work.Namespace+"/"+s.work.Name, hash, hash, r.clock())
		return ctrl.Result{}, nil
	}
	if s.payload, err = s.app.Unstructured(); err != nil {
		return ctrl.Result{}, err
	}
	if s.refreshCovered {
		annotations := s.payload.GetAnnotations()
		delete(annotations, argocd.AnnotationRefresh)
		delete(annotations, argocd.AnnotationHydrate)
		s.payload.SetAnnotations(annotations)
	}
	desired, err := BuildWork(s.payload, BuildOptions{
		Cluster:              s.cluster,
		WorkName:             name,
		SpokeArgoCDNamespace: r.Options.SpokeArgoCDNamespace,
		AppProject:           s.project,
		OperationBaseline:    baseline,
	})
	var invalid *InvalidApplicationError
	if errors.As(err, &invalid) {
		s.problem(argocd.ConditionInvalidSpec, "%v", err)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if from == "" {
		from = builtFrom(s.app, r.Options.SpokeArgoCDNamespace, in)
	}
	// Not part of the spec hash: a work whose digest alone changed is not written again.
	desired.Annotations[AnnotationBuiltFrom] = from
	s.desired, s.desiredHash = desired, desired.Annotations[AnnotationSpecHash]
	r.built.record(appKey, s.app.GetResourceVersion(), inputs, s.desiredHash)
	if s.work != nil && !s.work.DeletionTimestamp.IsZero() {
		// The work is still being removed (the Application moved away and back); its events requeue.
		return ctrl.Result{}, nil
	}
	key := desired.Namespace + "/" + desired.Name
	cached := ""
	if s.work != nil {
		cached = s.work.Annotations[AnnotationSpecHash]
	}
	if r.expected.satisfied(key, cached, desired.Annotations[AnnotationSpecHash], r.clock()) {
		return ctrl.Result{}, nil
	}
	if err := r.Works.Apply(ctx, desired); err != nil {
		if errors.Is(err, workclient.ErrUnknownCluster) {
			s.problem(argocd.ConditionUnknownCluster, "%v", err)
			return ctrl.Result{RequeueAfter: r.Options.UnknownClusterRetry}, nil
		}
		return ctrl.Result{}, err
	}
	r.expected.written(key, desired.Annotations[AnnotationSpecHash], r.clock())
	log.FromContext(ctx).V(1).Info("Applied work", "work", klog.KObj(desired))
	return ctrl.Result{}, nil
}

// workName is the name of the Application's work in its cluster: the work it already has there (possibly
// written by the earlier OCM pull controller, which named works <application>-<uid prefix>), else WorkName.
// Taking over the existing work updates the managed cluster's Application in place instead of deleting it.
func (r *Reconciler) workName(ctx context.Context, s *state) (string, error) {
	works, err := r.Works.ListForApplication(ctx, s.app.GetNamespace(), s.app.GetName())
	if err != nil {
		return "", err
	}
	for _, w := range works {
		if w.Namespace == s.cluster && w.DeletionTimestamp.IsZero() {
			return w.Name, nil
		}
	}
	return WorkName(s.app.GetNamespace(), s.app.GetName()), nil
}

// removeStaleWorks deletes the works the Application has in other clusters (it moved to another cluster).
func (r *Reconciler) removeStaleWorks(ctx context.Context, s *state) (ctrl.Result, error) {
	_, err := r.deleteWorks(ctx, s.app.GetNamespace(), s.app.GetName(), s.cluster)
	return ctrl.Result{}, err
}

// current reports whether the cached work carries exactly what the Application asks for now.
func (s *state) current() bool {
	return s.work != nil && s.desiredHash != "" && s.work.Annotations[AnnotationSpecHash] == s.desiredHash
}
