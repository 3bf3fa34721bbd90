package sim

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/ocm/pkg/work/helper"
	"open-cluster-management.io/ocm/pkg/work/spoke/conditions"
	"open-cluster-management.io/ocm/pkg/work/spoke/statusfeedback"
)

// This file writes a work's status as the OCM work agent (ocm v1.2.1) does: its manifest controller reports
// the Applied conditions, then its status controller the Available conditions and the status feedback. The
// conditions, reasons and messages are the agent's; the feedback values are the agent's StatusReader's (see
// feedbackReader).

const statusFeedbackSynced = "StatusFeedbackSynced"

// manifestResult is the outcome of applying one manifest of a work.
type manifestResult struct {
	meta workv1.ManifestResourceMeta
	err  error
}

// manifestHeader is the part of a manifest that identifies it.
type manifestHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// resourceMeta identifies the i-th manifest of a work as the agent's helper.BuildResourceMeta does, with a
// small REST mapping of its own (the simulated cluster accepts every kind).
func resourceMeta(i int, raw []byte) (workv1.ManifestResourceMeta, manifestHeader, error) {
	m := workv1.ManifestResourceMeta{Ordinal: int32(i)} //nolint:gosec // a work has few manifests
	var h manifestHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return m, h, err
	}
	group, version, found := strings.Cut(h.APIVersion, "/")
	if !found {
		group, version = "", h.APIVersion
	}
	if h.Kind == "" || version == "" {
		return m, h, fmt.Errorf("Object 'Kind' is missing in '%s'", truncate(raw, 80)) //nolint:revive,staticcheck // the apimachinery message
	}
	m.Group, m.Version, m.Kind = group, version, h.Kind
	m.Name, m.Namespace = h.Metadata.Name, h.Metadata.Namespace
	m.Resource = resourceOf(h.Kind)
	if clusterScoped[h.Kind] {
		m.Namespace = ""
	}
	return m, h, nil
}

var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "Node": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "APIService": true,
}

// resourceOf is the plural resource name of a kind.
func resourceOf(kind string) string {
	r := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(r, "s"), strings.HasSuffix(r, "x"), strings.HasSuffix(r, "ch"), strings.HasSuffix(r, "sh"):
		return r + "es"
	case strings.HasSuffix(r, "y") && !strings.HasSuffix(r, "ay") && !strings.HasSuffix(r, "ey") && !strings.HasSuffix(r, "oy"):
		return r[:len(r)-1] + "ies"
	default:
		return r + "s"
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n])
	}
	return string(b)
}

// readManifests applies a work's manifests to the simulated cluster: each one succeeds when it can be read;
// the first Application among them goes to the simulated Argo CD.
func readManifests(w *workv1.ManifestWork) ([]manifestResult, *manifestApp) {
	results := make([]manifestResult, len(w.Spec.Workload.Manifests))
	var application *manifestApp
	for i, m := range w.Spec.Workload.Manifests {
		rm, h, err := resourceMeta(i, m.Raw)
		results[i] = manifestResult{meta: rm, err: err}
		if err == nil && application == nil && applicationGroupKind(h.APIVersion, h.Kind) {
			application, results[i].err = parseApplication(m.Raw)
		}
	}
	return results, application
}

// appliedStatus is the status the agent's manifest controller writes once it applied the work's manifests.
func appliedStatus(work *workv1.ManifestWork, results []manifestResult) workv1.ManifestWorkStatus {
	status := *work.Status.DeepCopy()
	manifests := make([]workv1.ManifestCondition, 0, len(results))
	allApplied := true
	for _, r := range results {
		c := metav1.Condition{Type: workv1.ManifestApplied, Status: metav1.ConditionTrue, Reason: "AppliedManifestComplete",
			Message: "Apply manifest complete", ObservedGeneration: work.Generation}
		if r.err != nil {
			allApplied = false
			c.Status, c.Reason = metav1.ConditionFalse, "AppliedManifestFailed"
			c.Message = fmt.Sprintf("Failed to apply manifest: %v", r.err)
		}
		manifests = append(manifests, workv1.ManifestCondition{ResourceMeta: r.meta, Conditions: []metav1.Condition{c}})
	}
	status.ResourceStatus.Manifests = helper.MergeManifestConditions(status.ResourceStatus.Manifests, manifests)
	if len(results) > 0 {
		applied := metav1.Condition{Type: workv1.WorkApplied, ObservedGeneration: work.Generation,
			Status: metav1.ConditionTrue, Reason: "AppliedManifestWorkComplete", Message: "Apply manifest work complete"}
		if !allApplied {
			applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, "AppliedManifestWorkFailed", "Failed to apply manifest work"
		}
		meta.SetStatusCondition(&status.Conditions, applied)
	}
	return status
}

// appliedCurrent reports whether the work's Applied condition is for its current generation.
func appliedCurrent(work *workv1.ManifestWork) bool {
	c := meta.FindStatusCondition(work.Status.Conditions, workv1.WorkApplied)
	return c != nil && c.ObservedGeneration == work.Generation
}

// valuesReader reads the feedback values of one rule: the agent's StatusReader, or feedbackReader.
type valuesReader interface {
	GetValuesByRule(obj *unstructured.Unstructured, rule workv1.FeedbackRule) ([]workv1.FeedbackValue, error)
}

var _ valuesReader = (*statusfeedback.StatusReader)(nil)

// objectReader returns the live object of a manifest on the simulated cluster, or nil when it does not exist.
type objectReader func(m workv1.ManifestResourceMeta) *unstructured.Unstructured

// availableStatus is the status the agent's status controller writes: each manifest's Available condition,
// the feedback values of its feedback rules and the StatusFeedbackSynced condition, and the work's
// aggregated Available condition. It returns the status unchanged before the work is applied.
func availableStatus(work *workv1.ManifestWork, read objectReader, reader valuesReader) workv1.ManifestWorkStatus {
	status := *work.Status.DeepCopy()
	if meta.FindStatusCondition(status.Conditions, workv1.WorkApplied) == nil {
		return status
	}
	for i := range status.ResourceStatus.Manifests {
		m := &status.ResourceStatus.Manifests[i]
		obj := read(m.ResourceMeta)
		if obj == nil {
			meta.SetStatusCondition(&m.Conditions, metav1.Condition{Type: workv1.ManifestAvailable,
				Status: metav1.ConditionFalse, Reason: "ResourceNotAvailable", Message: "Resource is not available"})
			continue
		}
		meta.SetStatusCondition(&m.Conditions, metav1.Condition{Type: workv1.ManifestAvailable,
			Status: metav1.ConditionTrue, Reason: "ResourceAvailable", Message: "Resource is available"})
		option := helper.FindManifestConfiguration(m.ResourceMeta, work.Spec.ManifestConfigs)
		values, synced := feedbackValues(obj, option, reader)
		if !equality.Semantic.DeepEqual(m.StatusFeedbacks.Values, values) {
			meta.RemoveStatusCondition(&m.Conditions, synced.Type)
		}
		meta.SetStatusCondition(&m.Conditions, synced)
		m.StatusFeedbacks.Values = values
		conditions.PruneConditionsGeneratedByConditionRules(&m.Conditions, work.Generation)
	}
	for _, c := range conditions.AggregateManifestConditions(work.Generation, status.ResourceStatus.Manifests) {
		meta.SetStatusCondition(&status.Conditions, c)
	}
	conditions.PruneConditionsGeneratedByConditionRules(&status.Conditions, work.Generation)
	return status
}

// feedbackValues reads an object's feedback values as the agent's status controller does.
func feedbackValues(obj *unstructured.Unstructured, option *workv1.ManifestConfigOption,
	reader valuesReader) ([]workv1.FeedbackValue, metav1.Condition) {
	if option == nil || len(option.FeedbackRules) == 0 {
		return nil, metav1.Condition{Type: statusFeedbackSynced, Reason: "NoStatusFeedbackSynced", Status: metav1.ConditionTrue}
	}
	var values []workv1.FeedbackValue
	var errs []error
	for _, rule := range option.FeedbackRules {
		v, err := reader.GetValuesByRule(obj, rule)
		if err != nil {
			errs = append(errs, err)
		}
		values = append(values, v...)
	}
	if err := utilerrors.NewAggregate(errs); err != nil {
		return values, metav1.Condition{Type: statusFeedbackSynced, Reason: "StatusFeedbackSyncFailed", Status: metav1.ConditionFalse,
			Message: fmt.Sprintf("Sync status feedback failed with error %v", err)}
	}
	return values, metav1.Condition{Type: statusFeedbackSynced, Reason: "StatusFeedbackSynced", Status: metav1.ConditionTrue}
}

// statusEqual reports whether two work statuses are the same, as the agent decides whether to patch.
func statusEqual(a, b *workv1.ManifestWorkStatus) bool {
	return equality.Semantic.DeepEqual(a.ResourceStatus, b.ResourceStatus) && equality.Semantic.DeepEqual(a.Conditions, b.Conditions)
}
