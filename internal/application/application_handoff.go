package application

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// noOperation is the operation baseline when the managed cluster had never run an operation.
const noOperation = "none"

// handOff clears, on the hub, what the managed cluster has taken over: the refresh annotation once the work
// carrying it is applied, and the sync operation once the managed cluster has run it. On the hub the
// Application is not reconciled by Argo CD, so nobody else clears them; left in place they would be applied
// again with every later change, and `argocd app sync` would wait forever for the operation to end.
func (r *Reconciler) handOff(ctx context.Context, s *state) (ctrl.Result, error) {
	if !s.current() {
		return ctrl.Result{}, nil
	}
	d := appstatus.FromWork(s.work, appstatus.Options{})
	if !d.Applied {
		return ctrl.Result{}, nil
	}
	clearRefresh := s.app.GetAnnotations()[argocd.AnnotationRefresh] != ""
	clearOperation := operationHandedOff(s.app, s.work, d.Status)
	if !clearRefresh && !clearOperation {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(s.app.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if clearRefresh {
		a := s.app.GetAnnotations()
		delete(a, argocd.AnnotationRefresh)
		s.app.SetAnnotations(a)
	}
	if clearOperation {
		delete(s.app.Object, "operation")
	}
	if err := r.Client.Patch(ctx, s.app, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("clear refresh/operation on application %s: %w", klog.KObj(s.app), err)
	}
	log.FromContext(ctx).Info("Handed off to the managed cluster", "refresh", clearRefresh, "operation", clearOperation)
	return ctrl.Result{}, nil
}

// operationBaseline returns the startedAt of the managed cluster's last operation at the time the hub's
// .operation was first delivered; it stays in the work for as long as the hub has that operation.
func operationBaseline(app *unstructured.Unstructured, work *workv1.ManifestWork) string {
	if app.Object["operation"] == nil {
		return ""
	}
	if work == nil {
		return noOperation
	}
	if b := work.Annotations[AnnotationOperationBaseline]; b != "" {
		return b
	}
	if started := feedbackOperationStartedAt(work); started != "" {
		return started
	}
	return noOperation
}

// operationHandedOff reports whether the managed cluster has run the hub's .operation to its end: an operation
// newer than the baseline has finished there.
func operationHandedOff(app *unstructured.Unstructured, work *workv1.ManifestWork, status map[string]any) bool {
	if app.Object["operation"] == nil {
		return false
	}
	op, _ := status["operationState"].(map[string]any)
	if op == nil {
		return false
	}
	started, _ := op["startedAt"].(string)
	phase, _ := op["phase"].(string)
	if started == "" || started == work.Annotations[AnnotationOperationBaseline] {
		return false
	}
	switch phase {
	case "Succeeded", "Failed", "Error":
		return true
	}
	return false
}

func feedbackOperationStartedAt(work *workv1.ManifestWork) string {
	for _, m := range work.Status.ResourceStatus.Manifests {
		for _, v := range m.StatusFeedbacks.Values {
			if v.Name == appstatus.FeedbackOperationStartedAt && v.Value.String != nil {
				return *v.Value.String
			}
		}
	}
	return ""
}
