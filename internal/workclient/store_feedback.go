package workclient

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
)

// withKeptFeedback returns the received status with the feedback of the stored one where the agent has not read
// its resources' feedback yet: a manifest with no StatusFeedbackSynced condition and no values takes the
// values and that condition from the same manifest of the stored status. A work agent that restarts in
// grpc mode builds each work's status afresh, and its first report of a work comes before it reads the
// feedback; the kube transport keeps the feedback over that report (the agent merges its manifest conditions
// into the status the hub has), and so does this store. Without it every hub Application of a restarted
// agent's cluster would lose its status until the agent's next report. The received status is not changed.
func withKeptFeedback(received *workv1.ManifestWorkStatus, stored *keptWork) *workv1.ManifestWorkStatus {
	if stored.status == nil || !awaitsFeedback(received.ResourceStatus.Manifests) {
		return received
	}
	last := stored.decodedStatus()
	kept := *received
	kept.ResourceStatus.Manifests = append([]workv1.ManifestCondition(nil), received.ResourceStatus.Manifests...)
	for i := range kept.ResourceStatus.Manifests {
		m := &kept.ResourceStatus.Manifests[i]
		if !feedbackUnread(m) {
			continue
		}
		for _, l := range last.ResourceStatus.Manifests {
			synced := meta.FindStatusCondition(l.Conditions, appstatus.StatusFeedbackSynced)
			if l.ResourceMeta != m.ResourceMeta || synced == nil {
				continue
			}
			m.StatusFeedbacks = l.StatusFeedbacks
			m.Conditions = append(append([]metav1.Condition(nil), m.Conditions...), *synced)
			break
		}
	}
	return &kept
}

// awaitsFeedback reports whether a manifest's feedback has not been read yet.
func awaitsFeedback(manifests []workv1.ManifestCondition) bool {
	for i := range manifests {
		if feedbackUnread(&manifests[i]) {
			return true
		}
	}
	return false
}

func feedbackUnread(m *workv1.ManifestCondition) bool {
	return len(m.StatusFeedbacks.Values) == 0 && meta.FindStatusCondition(m.Conditions, appstatus.StatusFeedbackSynced) == nil
}
