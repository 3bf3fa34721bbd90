package appstatus

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// StatusFeedbackSynced is the manifest condition the work agent sets when it reads (or fails to read) feedback.
const StatusFeedbackSynced = "StatusFeedbackSynced"

// Condition is one entry of an Application's status.conditions.
type Condition struct {
	Type    string
	Message string
}

// Delivery is what a work says about the delivery of its Application.
type Delivery struct {
	// Status is the Application status rebuilt from the feedback; empty when no feedback came back yet.
	Status map[string]any
	// Conditions are the delivery problems the work shows.
	Conditions []Condition
	// Applied reports that the agent applied the work's current generation.
	Applied bool
	// EverApplied reports that the agent applied some generation of the work.
	EverApplied bool
}

// Options are the inputs of FromWork that do not come from the work.
type Options struct {
	// Now is the current time.
	Now time.Time
	// ApplyTimeout is how long a new work may wait for its first Applied condition before that is an error.
	ApplyTimeout time.Duration
}

// FromWork reads the delivery state and the feedback of the Application in a work.
func FromWork(work *workv1.ManifestWork, opts Options) Delivery {
	d := Delivery{Status: map[string]any{}}
	cluster := work.Namespace
	if c := metaCondition(work.Status.Conditions, workv1.WorkApplied); c != nil {
		d.EverApplied = c.Status == metav1.ConditionTrue
		d.Applied = d.EverApplied && c.ObservedGeneration >= work.Generation
		if c.Status == metav1.ConditionFalse {
			d.Conditions = append(d.Conditions, Condition{
				Type:    argocd.ConditionDeliveryError,
				Message: fmt.Sprintf("the work agent of cluster %s could not apply the work: %s", cluster, c.Message),
			})
		}
	} else if opts.ApplyTimeout > 0 && !work.CreationTimestamp.IsZero() && opts.Now.Sub(work.CreationTimestamp.Time) > opts.ApplyTimeout {
		d.Conditions = append(d.Conditions, Condition{
			Type: argocd.ConditionDeliveryError,
			Message: fmt.Sprintf("the work for cluster %s is not applied %s after it was created: is the cluster's agent running?",
				cluster, opts.ApplyTimeout),
		})
	}

	m := applicationManifest(work)
	if m == nil {
		return d
	}
	if c := metaCondition(m.Conditions, workv1.ManifestApplied); c != nil && c.Status == metav1.ConditionFalse {
		d.Conditions = append(d.Conditions, Condition{
			Type:    argocd.ConditionDeliveryError,
			Message: fmt.Sprintf("applying the Application on cluster %s failed: %s", cluster, c.Message),
		})
	}
	if c := metaCondition(m.Conditions, workv1.ManifestAvailable); c != nil && c.Status == metav1.ConditionFalse {
		d.Conditions = append(d.Conditions, Condition{
			Type:    argocd.ConditionDeliveryError,
			Message: fmt.Sprintf("the Application is not available on cluster %s: %s", cluster, c.Message),
		})
	}
	if c := metaCondition(m.Conditions, StatusFeedbackSynced); c != nil && c.Status == metav1.ConditionFalse {
		d.Conditions = append(d.Conditions, Condition{
			Type:    argocd.ConditionDeliveryWarning,
			Message: fmt.Sprintf("part of the status from cluster %s is missing: %s", cluster, c.Message),
		})
	}
	status, errs := StatusFromFeedback(m.StatusFeedbacks.Values)
	for _, err := range errs {
		d.Conditions = append(d.Conditions, Condition{
			Type:    argocd.ConditionDeliveryWarning,
			Message: fmt.Sprintf("status feedback from cluster %s: %v", cluster, err),
		})
	}
	d.Status = status
	return d
}

// SpokeUID returns the metadata.uid of the Application on the managed cluster as the work's feedback reports
// it, or "" when the work reports none.
func SpokeUID(work *workv1.ManifestWork) string {
	m := applicationManifest(work)
	if m == nil {
		return ""
	}
	for _, v := range m.StatusFeedbacks.Values {
		if v.Name == FeedbackUID && v.Value.String != nil {
			return *v.Value.String
		}
	}
	return ""
}

// applicationManifest returns the status of the Application manifest in a work.
func applicationManifest(work *workv1.ManifestWork) *workv1.ManifestCondition {
	for i := range work.Status.ResourceStatus.Manifests {
		m := &work.Status.ResourceStatus.Manifests[i]
		if m.ResourceMeta.Group == argocd.Group && (m.ResourceMeta.Kind == argocd.ApplicationGVK.Kind || m.ResourceMeta.Resource == "applications") {
			return m
		}
	}
	return nil
}

// StatusFromFeedback rebuilds an Application status from feedback values: the raw-JSON sections where they came
// back, the scalar fields where a section did not. It returns an empty map when there is no feedback.
func StatusFromFeedback(values []workv1.FeedbackValue) (map[string]any, []error) {
	status := map[string]any{}
	scalars := map[string]string{}
	var errs []error
	for _, v := range values {
		section, isSection := strings.CutPrefix(v.Name, sectionPrefix)
		switch {
		case isSection && v.Value.JsonRaw != nil:
			var parsed any
			if err := json.Unmarshal([]byte(*v.Value.JsonRaw), &parsed); err != nil {
				errs = append(errs, fmt.Errorf("section %s is not valid JSON: %w", section, err))
				continue
			}
			status[section] = parsed
		case isSection && v.Value.String != nil:
			status[section] = *v.Value.String
		case v.Value.String != nil:
			scalars[v.Name] = *v.Value.String
		}
	}
	if _, ok := status["sync"]; !ok && scalars[FeedbackSyncStatus] != "" {
		sync := map[string]any{"status": scalars[FeedbackSyncStatus]}
		if r := scalars[FeedbackRevision]; r != "" {
			sync["revision"] = r
		}
		status["sync"] = sync
	}
	if _, ok := status["health"]; !ok && scalars[FeedbackHealthStatus] != "" {
		status["health"] = map[string]any{"status": scalars[FeedbackHealthStatus]}
	}
	if _, ok := status["operationState"]; !ok && scalars[FeedbackOperationPhase] != "" && scalars[FeedbackOperationStartedAt] != "" {
		// operationState.operation is required by the Application CRD; the scalar fields do not carry it.
		op := map[string]any{
			"operation": map[string]any{},
			"phase":     scalars[FeedbackOperationPhase],
			"startedAt": scalars[FeedbackOperationStartedAt],
		}
		if f := scalars[FeedbackOperationFinishedAt]; f != "" {
			op["finishedAt"] = f
		}
		if m := scalars[FeedbackOperationMessage]; m != "" {
			op["message"] = m
		}
		status["operationState"] = op
	}
	return status, errs
}

// Compose returns the hub Application status: the status from the managed cluster with the delivery conditions
// appended to its conditions. A condition that was already present keeps its lastTransitionTime.
func Compose(spoke map[string]any, delivery []Condition, previous []argocd.Condition, now time.Time) map[string]any {
	status := make(map[string]any, len(spoke)+1)
	for k, v := range spoke {
		status[k] = v
	}
	var conditions []any
	if c, ok := spoke["conditions"].([]any); ok {
		conditions = append(conditions, c...)
	}
	for _, c := range delivery {
		conditions = append(conditions, map[string]any{
			"type":               c.Type,
			"message":            c.Message,
			"lastTransitionTime": transitionTime(previous, c, now),
		})
	}
	if len(conditions) > 0 {
		status["conditions"] = conditions
	} else {
		delete(status, "conditions")
	}
	return status
}

func transitionTime(previous []argocd.Condition, c Condition, now time.Time) string {
	for _, p := range previous {
		if p.Type == c.Type && p.Message == c.Message && p.LastTransitionTime != "" {
			return p.LastTransitionTime
		}
	}
	return now.UTC().Format(time.RFC3339)
}

func metaCondition(conditions []metav1.Condition, t string) *metav1.Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

// WithReconciledAt returns the status with reconciledAt, the time of the comparison the status shows, which
// `argocd app sync` and `app wait` wait for to reach the end of the operation before they return. The managed
// cluster's own reconciledAt does not come back (see Sections: it changes on every refresh), so the hub sets it
// when it writes a status. While the status shows an operation that ended and the cluster's comparison after
// that end is not known to be in it (compared false: Argo CD compares again as soon as an operation ends, and
// until then the status shows the comparison before the operation), reconciledAt is one second before the
// operation's end. Otherwise it is now, or the end of the operation when that is later (the managed cluster's
// clock may be ahead of the hub's). argocd.StatusHash keeps only which of the two it is, so the time alone
// never causes a write.
func WithReconciledAt(status map[string]any, now time.Time, compared bool) map[string]any {
	at := now.UTC().Truncate(time.Second)
	if finished, ok := OperationEnd(status); ok {
		switch {
		case !compared:
			at = finished.Add(-time.Second)
		case finished.After(at):
			at = finished
		}
	}
	out := make(map[string]any, len(status)+1)
	for k, v := range status {
		out[k] = v
	}
	out[argocd.StatusReconciledAt] = at.Format(time.RFC3339)
	return out
}

// OperationEnd returns the end of the operation the status shows, if it ended.
func OperationEnd(status map[string]any) (time.Time, bool) {
	state, _ := status["operationState"].(map[string]any)
	s, _ := state["finishedAt"].(string)
	finished, err := time.Parse(time.RFC3339, s)
	return finished.UTC(), err == nil
}

// Synced reports whether the status's comparison found the Application in sync.
func Synced(status map[string]any) bool {
	sync, _ := status["sync"].(map[string]any)
	return sync["status"] == "Synced"
}

// WithoutOperationState returns the status without its operationState. While the managed cluster has not begun
// the operation the hub asked for, its operationState is the one of an earlier operation: argocd-server resets
// it when it sets an operation, and the hub must not bring it back.
func WithoutOperationState(status map[string]any) map[string]any {
	if _, ok := status["operationState"]; !ok {
		return status
	}
	out := make(map[string]any, len(status))
	for k, v := range status {
		if k != "operationState" {
			out[k] = v
		}
	}
	return out
}
