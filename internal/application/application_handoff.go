package application

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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

// refreshHard is the AnnotationRefresh value of a hard refresh.
const refreshHard = "hard"

// handOff clears, on the hub, what the managed cluster has taken over: the refresh annotation (and the hydrate
// annotation argocd-server sets with it) once the work carrying it is applied, or at once when a refresh handed
// off moments ago covers it, and the sync operation once the managed cluster has run it. On the hub the
// Application is not reconciled by Argo CD, so nobody else clears them; left in place they would be applied
// again with every later change, and `argocd app sync` would wait forever for the operation to end.
func (r *Reconciler) handOff(ctx context.Context, s *state) (ctrl.Result, error) {
	if !s.current() {
		return ctrl.Result{}, nil
	}
	d := r.readDelivery(s, s.work)
	annotations := s.app.GetAnnotations()
	refresh, hasRefresh := annotations[argocd.AnnotationRefresh]
	hydrate, hasHydrate := annotations[argocd.AnnotationHydrate]
	clearRefresh := hasRefresh && (s.refreshCovered || d.Applied)
	clearHydrate := hasHydrate && (s.refreshCovered || d.Applied)
	clearOperation := d.Applied && operationHandedOff(s.app, s.work, d.Status)
	if !clearRefresh && !clearHydrate && !clearOperation {
		return ctrl.Result{}, nil
	}
	// Each removal is conditional on the value still being the one handed off ("test" ops), not on the
	// Application's resourceVersion: status writes move that often while a sync runs, and a new refresh or
	// operation set in the meantime must not be removed.
	var ops []map[string]any
	removeAnnotation := func(key, value string) {
		path := "/metadata/annotations/" + jsonPointerEscape(key)
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": value}, map[string]any{"op": "remove", "path": path})
	}
	if clearRefresh {
		removeAnnotation(argocd.AnnotationRefresh, refresh)
	}
	if clearHydrate {
		removeAnnotation(argocd.AnnotationHydrate, hydrate)
	}
	if clearOperation {
		ops = append(ops, map[string]any{"op": "test", "path": "/operation", "value": s.app.Operation},
			map[string]any{"op": "remove", "path": "/operation"})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("encode hand-off of application %s: %w", klog.KObj(s.app), err)
	}
	err = r.Client.Patch(ctx, s.app, client.RawPatch(types.JSONPatchType, data))
	if apierrors.IsInvalid(err) {
		// A test op failed: the refresh or the operation changed since it was read; the change requeues.
		log.FromContext(ctx).V(1).Info("Hand-off skipped: the Application changed", "error", err.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("clear refresh/operation on application %s: %w", klog.KObj(s.app), err)
	}
	if clearRefresh && !s.refreshCovered {
		r.refreshes.handedOff(client.ObjectKeyFromObject(s.app).String(), refresh == refreshHard, r.clock())
	}
	log.FromContext(ctx).Info("Handed off to the managed cluster", "refresh", clearRefresh && !s.refreshCovered,
		"refreshCovered", clearRefresh && s.refreshCovered, "operation", clearOperation)
	return ctrl.Result{}, nil
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// operationBaseline returns the startedAt of the managed cluster's last operation at the time the hub's
// .operation was first delivered; it stays in the work for as long as the hub has that operation.
func operationBaseline(app *argocd.Application, work *workv1.ManifestWork) string {
	if !app.HasOperation() {
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

// operationHandedOff reports whether the managed cluster has run the hub's .operation to its end: its last
// operation carries the marker of the hub's operation and has ended.
func operationHandedOff(app *argocd.Application, work *workv1.ManifestWork, status map[string]any) bool {
	op, err := app.OperationValue()
	if err != nil || op == nil {
		return false
	}
	state, _ := status["operationState"].(map[string]any)
	phase, _ := state["phase"].(string)
	switch phase {
	case "Succeeded", "Failed", "Error":
	default:
		return false
	}
	return operationBegun(app, work)
}

// operationBegun reports whether the managed cluster has begun the hub's .operation: its last operation
// carries the marker of the hub's operation.
func operationBegun(app *argocd.Application, work *workv1.ManifestWork) bool {
	op, err := app.OperationValue()
	if err != nil || op == nil {
		return false
	}
	marker := feedbackValue(work, appstatus.FeedbackOperationMarker)
	return marker != "" && marker == OperationMarker(op, work.Annotations[AnnotationOperationBaseline])
}

// OperationMarker identifies one delivery of a hub operation: the operation and the baseline it was delivered
// against, so that the same operation asked for twice gets two markers.
func OperationMarker(op any, baseline string) string {
	data, _ := json.Marshal(op)
	sum := sha256.Sum256(append(append(data, '|'), baseline...))
	return hex.EncodeToString(sum[:8])
}

func feedbackOperationStartedAt(work *workv1.ManifestWork) string {
	return feedbackValue(work, appstatus.FeedbackOperationStartedAt)
}

// feedbackValue returns a scalar feedback value of the work's Application.
func feedbackValue(work *workv1.ManifestWork, name string) string {
	for _, m := range work.Status.ResourceStatus.Manifests {
		for _, v := range m.StatusFeedbacks.Values {
			if v.Name == name && v.Value.String != nil {
				return *v.Value.String
			}
		}
	}
	return ""
}
