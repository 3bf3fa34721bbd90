package application

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Mover says where a cluster's works are while `argocd-pull migrate` moves the cluster between transports, and
// gives the transports by name (workclient.Router does both).
type Mover interface {
	Move(ctx context.Context, cluster string) (workclient.Move, error)
	Transport(name string) (workclient.Client, error)
}

// AnnotationOrphan marks a work that was set to orphan everything it applied, in the transport a cluster moved
// away from: it is deleted once the transport holds it so, and its Applications stay on the cluster, where the
// work of the transport the cluster moved to keeps them.
const AnnotationOrphan = "argocd-pull.io/orphan"

// checkMove finds the transports of the cluster's move; labels that contradict each other, or a transport this
// controller does not run, stop the delivery (no work is touched) and say why.
func (r *Reconciler) checkMove(ctx context.Context, s *state) {
	if r.Moves == nil {
		return
	}
	m, err := r.Moves.Move(ctx, s.cluster)
	if err != nil {
		s.problem(argocd.ConditionDeliveryError, "%v", err)
		return
	}
	s.move = m
	for _, name := range []string{m.Home, m.CopyTo, m.Retire} {
		if name == "" {
			continue
		}
		if _, err := r.Moves.Transport(name); err != nil {
			s.problem(argocd.ConditionDeliveryError, "cluster %s (labels %s, %s, %s): %v", s.cluster,
				workclient.LabelTransport, workclient.LabelCopyTo, workclient.LabelRetire, err)
			return
		}
	}
}

// moveWork keeps the Application's works in step while its cluster moves between transports: a copy of the
// work in the transport the cluster is copied to, and, in the transport it moved away from, the old work set to
// orphan what it applied and then deleted.
func (r *Reconciler) moveWork(ctx context.Context, s *state) (ctrl.Result, error) {
	if r.Moves == nil || s.desired == nil {
		return ctrl.Result{}, nil
	}
	m := s.move
	if m.CopyTo != "" {
		if err := r.copyWork(ctx, s, m.CopyTo); err != nil {
			return ctrl.Result{}, err
		}
	}
	if m.Retire != "" {
		if err := r.retireWorks(ctx, s, m.Retire); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// copyWork applies the desired work to the transport the cluster is copied to, unless it is there already.
func (r *Reconciler) copyWork(ctx context.Context, s *state, transport string) error {
	t, err := r.Moves.Transport(transport)
	if err != nil {
		return err
	}
	existing, err := t.Get(ctx, s.cluster, s.desired.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get work %s/%s from transport %s: %w", s.cluster, s.desired.Name, transport, err)
	}
	cached := ""
	if err == nil {
		if !existing.DeletionTimestamp.IsZero() {
			// A copy retired earlier is still being removed; its events requeue.
			return nil
		}
		cached = existing.Annotations[AnnotationSpecHash]
	}
	key := transport + ":" + s.cluster + "/" + s.desired.Name
	if r.expected.satisfied(key, cached, s.desired.Annotations[AnnotationSpecHash], r.clock()) {
		return nil
	}
	if err := t.Apply(ctx, s.desired); err != nil {
		return fmt.Errorf("copy work %s/%s to transport %s: %w", s.cluster, s.desired.Name, transport, err)
	}
	r.expected.written(key, s.desired.Annotations[AnnotationSpecHash], r.clock())
	log.FromContext(ctx).Info("Copied work to the transport the cluster moves to", "work", klog.KObj(s.desired), "transport", transport)
	return nil
}

// retireWorks removes the Application's works in the cluster from the transport the cluster moved away from:
// each is first applied with the Orphan propagation policy (and AnnotationOrphan), and deleted once the
// transport holds it so. The work agent then leaves the Application and its resources on the cluster.
func (r *Reconciler) retireWorks(ctx context.Context, s *state, transport string) error {
	t, err := r.Moves.Transport(transport)
	if err != nil {
		return err
	}
	works, err := t.ListForApplication(ctx, s.app.GetNamespace(), s.app.GetName())
	if err != nil {
		return err
	}
	for _, w := range works {
		if w.Namespace != s.cluster || !w.DeletionTimestamp.IsZero() {
			continue
		}
		if w.Annotations[AnnotationOrphan] == "true" {
			if err := t.Delete(ctx, w.Namespace, w.Name); err != nil {
				return fmt.Errorf("delete orphaning work %s/%s from transport %s: %w", w.Namespace, w.Name, transport, err)
			}
			log.FromContext(ctx).Info("Deleted orphaning work from the transport the cluster moved away from", "work", klog.KObj(w), "transport", transport)
			continue
		}
		if err := t.Apply(ctx, OrphaningWork(s.desired, w.Name)); err != nil {
			return fmt.Errorf("set work %s/%s of transport %s to orphan: %w", w.Namespace, w.Name, transport, err)
		}
	}
	return nil
}

// OrphaningWork returns the work as it is retired under name: the same manifests, set to orphan them all when
// it is deleted, and marked with AnnotationOrphan.
func OrphaningWork(desired *workv1.ManifestWork, name string) *workv1.ManifestWork {
	w := desired.DeepCopy()
	w.Name = name
	w.Spec.DeleteOption = &workv1.DeleteOption{PropagationPolicy: workv1.DeletePropagationPolicyTypeOrphan}
	delete(w.Annotations, AnnotationSpecHash)
	w.Annotations[AnnotationOrphan] = "true"
	return w
}
