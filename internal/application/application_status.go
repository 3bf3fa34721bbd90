package application

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// writeStatus writes the hub Application's .status when it differs from what the hub has: the managed
// cluster's status from the work's feedback, with the delivery conditions. What the hub has is the cached
// status, or the status this controller wrote last while the cache has not caught up with that write.
func (r *Reconciler) writeStatus(ctx context.Context, s *state) (ctrl.Result, error) {
	work := s.work
	if work == nil && s.frozen {
		// Bad input keeps the works where they are; keep showing what they report.
		works, err := r.Works.ListForApplication(ctx, s.app.GetNamespace(), s.app.GetName())
		if err != nil {
			return ctrl.Result{}, err
		}
		for _, w := range works {
			if !w.DeletionTimestamp.IsZero() {
				continue
			}
			// The list may leave the status out; the work itself has it.
			if work, err = r.Works.Get(ctx, w.Namespace, w.Name); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("get work %s/%s: %w", w.Namespace, w.Name, err)
			}
			if work != nil {
				break
			}
		}
	}
	now := r.clock()
	var delivery appstatus.Delivery
	if work != nil {
		delivery = r.readDelivery(s, work)
	}
	conditions := append(append([]appstatus.Condition{}, s.conditions...), delivery.Conditions...)
	summary := s.app.StatusSummary()
	previous := summary.Conditions
	desired := appstatus.Compose(delivery.Status, conditions, previous, now)
	if work != nil && s.app.HasOperation() && !operationBegun(s.app, work) {
		desired = appstatus.WithoutOperationState(desired)
	}

	var result ctrl.Result
	if work != nil && !delivery.EverApplied && r.Options.ApplyTimeout > 0 && !work.CreationTimestamp.IsZero() {
		if wait := r.Options.ApplyTimeout - now.Sub(work.CreationTimestamp.Time); wait > 0 {
			result.RequeueAfter = wait
		}
	}

	key := client.ObjectKeyFromObject(s.app).String()
	desired, hash, settle, err := r.withReconciledAt(key, desired, summary, now)
	if err != nil {
		return result, err
	}
	result = lowestRequeue(result, ctrl.Result{RequeueAfter: settle})
	if hash == r.statuses.known(key, s.app.ResourceVersion, summary.Hash, now) {
		return result, nil
	}
	r.statuses.writing(key, hash, now)
	version, err := r.patchStatus(ctx, s.app, desired)
	if err != nil {
		r.statuses.forget(key)
		return result, err
	}
	r.statuses.written(key, version, now)
	r.recordTransitions(s.app, previous, conditions)
	return result, nil
}

// withReconciledAt returns the desired status with its reconciledAt (appstatus.WithReconciledAt: before the end
// of the operation it shows while the managed cluster's comparison after that end is awaited), its
// argocd.StatusHash, and how long until that comparison is taken as done.
func (r *Reconciler) withReconciledAt(key string, desired map[string]any, hub *argocd.StatusSummary, now time.Time) (map[string]any, string, time.Duration, error) {
	end, ok := appstatus.OperationEnd(desired)
	if !ok {
		out := appstatus.WithReconciledAt(desired, now, true)
		hash, err := argocd.StatusHash(out)
		return out, hash, 0, err
	}
	hash, err := argocd.StatusHash(desired)
	if err != nil {
		return nil, "", 0, err
	}
	finishedAt := end.Format(time.RFC3339)
	hubCompared := hub.OperationFinishedAt != "" && hub.ReconciledAt != "" &&
		sameTime(hub.OperationFinishedAt, finishedAt) && !argocd.ReconciledBeforeEnd(hub.ReconciledAt, hub.OperationFinishedAt)
	compared, wait := r.operationEnds.compared(key, finishedAt, hash, appstatus.Synced(desired), hubCompared, now)
	out := appstatus.WithReconciledAt(desired, now, compared)
	if _, had := desired[argocd.StatusReconciledAt]; compared && !had {
		// A reconciledAt not before the operation's end leaves the hash as it was without one, so the status is
		// not encoded a second time (most passes once an Application has synced).
		return out, hash, wait, nil
	}
	if hash, err = argocd.StatusHash(out); err != nil {
		return nil, "", 0, err
	}
	return out, hash, wait, nil
}

// sameTime reports whether two RFC 3339 times are the same instant.
func sameTime(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339, a)
	tb, err2 := time.Parse(time.RFC3339, b)
	return err1 == nil && err2 == nil && ta.Equal(tb)
}

// patchStatus replaces the Application's .status. The Application CRD has no status subresource; a JSON
// patch "add /status" replaces the whole status without reading it first. It returns the resourceVersion that
// carries the new status, the only part of the answer read: the apiserver answers with the metadata alone
// instead of encoding the whole Application, status included, for the controller to decode.
func (r *Reconciler) patchStatus(ctx context.Context, app *argocd.Application, status map[string]any) (string, error) {
	data, err := argocd.AppendJSON([]byte(`[{"op":"add","path":"/status","value":`), status)
	if err != nil {
		return "", fmt.Errorf("encode status of application %s: %w", klog.KObj(app), err)
	}
	data = append(data, "}]"...)
	answer := metadataOf(app)
	if err := r.Client.Patch(ctx, answer, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return "", fmt.Errorf("patch status of application %s: %w", klog.KObj(app), err)
	}
	return answer.ResourceVersion, nil
}

// metadataOf is an Application's name as a PartialObjectMetadata, which a write answered with the
// Application's metadata alone is decoded into.
func metadataOf(app *argocd.Application) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: argocd.ApplicationGVK.GroupVersion().String(), Kind: argocd.ApplicationGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Name},
	}
}

// recordTransitions emits a Warning event for each problem that was not in the previous status.
func (r *Reconciler) recordTransitions(app *argocd.Application, previous []argocd.Condition, conditions []appstatus.Condition) {
	if r.Recorder == nil {
		return
	}
	for _, c := range conditions {
		if hasCondition(previous, c) {
			continue
		}
		r.Recorder.Eventf(app, nil, corev1.EventTypeWarning, c.Type, "Deliver", "%s", c.Message)
	}
}

func hasCondition(conditions []argocd.Condition, c appstatus.Condition) bool {
	for _, p := range conditions {
		if p.Type == c.Type && p.Message == c.Message {
			return true
		}
	}
	return false
}
