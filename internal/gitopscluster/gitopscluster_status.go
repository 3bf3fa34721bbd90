package gitopscluster

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
)

// observation is everything one reconcile saw and did; the status is computed from it alone.
type observation struct {
	generation         int64
	argoNamespace      string
	argoNamespaceFound bool
	placement          placementResult
	registration       registration
	configMap          configMapResult
	console            consoleResult
	// consoleRenewAt is when the earliest console certificate is to be issued again (zero without the console).
	consoleRenewAt time.Time
	// ignored lists the spec fields the pull model accepts and does not act on.
	ignored []string
}

// maxListed bounds how many clusters a condition message names.
const maxListed = 5

// summarize joins up to maxListed items and says how many more there are.
func summarize(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:maxListed], "; "), len(items)-maxListed)
}

// ignoredFields lists the spec fields that are set but mean nothing in the pull model.
func ignoredFields(spec *v1alpha1.GitOpsClusterSpec) []string {
	var fields []string
	if spec.ArgoServer.Cluster != "" {
		fields = append(fields, "spec.argoServer.cluster")
	}
	if spec.ManagedServiceAccountRef != "" {
		fields = append(fields, "spec.managedServiceAccountRef")
	}
	if spec.CreateBlankClusterSecrets != nil && !*spec.CreateBlankClusterSecrets {
		fields = append(fields, "spec.createBlankClusterSecrets")
	}
	if spec.CreatePolicyTemplate != nil && *spec.CreatePolicyTemplate {
		fields = append(fields, "spec.createPolicyTemplate")
	}
	if spec.GitOpsAddon != nil {
		fields = append(fields, "spec.gitopsAddon")
	}
	if a := spec.ArgoCDAgentAddon; a != nil {
		// The addon's console is what argocd-pull builds; its installation fields have no meaning here.
		for _, f := range []struct {
			name string
			set  bool
		}{{"mode", a.Mode != ""}, {"operatorImage", a.OperatorImage != ""}, {"agentImage", a.AgentImage != ""}} {
			if f.set {
				fields = append(fields, "spec.argoCDAgentAddon."+f.name)
			}
		}
	}
	return fields
}

func placementCondition(obs *observation) metav1.Condition {
	p := obs.placement
	if !p.resolved {
		return metav1.Condition{Type: v1alpha1.ConditionPlacementResolved, Status: metav1.ConditionFalse, Reason: p.reason, Message: p.message}
	}
	return metav1.Condition{Type: v1alpha1.ConditionPlacementResolved, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonResolved,
		Message: fmt.Sprintf("Placement %s selects %d clusters in %d PlacementDecisions", p.placement, len(p.clusters), p.decisions)}
}

func registeredCondition(obs *observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionClustersRegistered, Status: metav1.ConditionFalse}
	reg := obs.registration
	switch {
	case !obs.placement.resolved:
		c.Reason = v1alpha1.ReasonPlacementNotResolved
		c.Message = fmt.Sprintf("Waiting for the Placement reference to resolve; the %d cluster secrets registered before are kept", reg.kept)
		return c
	case !obs.argoNamespaceFound:
		c.Reason = v1alpha1.ReasonArgoNamespaceNotFound
		c.Message = fmt.Sprintf("Argo CD namespace %s not found", obs.argoNamespace)
		return c
	}
	msg := fmt.Sprintf("%d of %d clusters registered in Argo CD namespace %s", reg.registered, len(obs.placement.clusters), obs.argoNamespace)
	if len(reg.conflicts) > 0 {
		msg += fmt.Sprintf("; %d conflicts: %s", len(reg.conflicts), summarize(reg.conflicts))
	}
	if len(reg.failures) > 0 {
		msg += fmt.Sprintf("; %d failed: %s", len(reg.failures), summarize(reg.failures))
	}
	if len(reg.shared) > 0 {
		msg += fmt.Sprintf("; %d through another GitOpsCluster's secret: %s", len(reg.shared), summarize(reg.shared))
	}
	c.Message = msg
	switch {
	case len(reg.conflicts) > 0:
		c.Reason = v1alpha1.ReasonNameConflict
	case len(reg.failures) > 0:
		c.Reason = v1alpha1.ReasonRegistrationFailed
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonRegistered
	}
	return c
}

func readyCondition(obs *observation, placement, registered metav1.Condition, console *metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case placement.Status != metav1.ConditionTrue:
		c.Reason, c.Message = placement.Reason, placement.Message
	case registered.Status != metav1.ConditionTrue:
		c.Reason, c.Message = registered.Reason, registered.Message
	case !obs.configMap.ok:
		c.Reason, c.Message = obs.configMap.reason, obs.configMap.message
	case console != nil && console.Status != metav1.ConditionTrue:
		c.Reason, c.Message = console.Reason, console.Message
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonReady
		c.Message = fmt.Sprintf("%d clusters registered with Argo CD in namespace %s", obs.registration.registered, obs.argoNamespace)
		if len(obs.ignored) > 0 {
			c.Message += "; ignored in the pull model: " + strings.Join(obs.ignored, ", ")
		}
	}
	return c
}

// computeStatus returns the status for what a reconcile observed and whether it differs from old. Conditions
// keep their last transition time while their status stays; lastUpdateTime moves only when something else does.
func computeStatus(old v1alpha1.GitOpsClusterStatus, obs observation, now metav1.Time) (v1alpha1.GitOpsClusterStatus, bool) {
	placement := placementCondition(&obs)
	registered := registeredCondition(&obs)
	conditions := []metav1.Condition{placement, registered}
	var console *metav1.Condition
	if obs.console.requested {
		c := consoleCondition(&obs)
		console = &c
		conditions = append(conditions, c)
	}
	ready := readyCondition(&obs, placement, registered, console)
	conditions = append(conditions, ready)

	next := v1alpha1.GitOpsClusterStatus{
		ObservedGeneration: obs.generation,
		SelectedClusters:   int32(len(obs.placement.clusters)),
		RegisteredClusters: int32(obs.registration.registered + obs.registration.kept),
		Phase:              v1alpha1.PhaseFailed,
		Message:            ready.Message,
		LastUpdateTime:     old.LastUpdateTime,
	}
	if ready.Status == metav1.ConditionTrue {
		next.Phase = v1alpha1.PhaseSuccessful
	}
	for _, c := range old.Conditions {
		if c.Type == v1alpha1.ConditionPlacementResolved || c.Type == v1alpha1.ConditionClustersRegistered || c.Type == v1alpha1.ConditionReady ||
			(c.Type == v1alpha1.ConditionConsoleReady && obs.console.requested) {
			next.Conditions = append(next.Conditions, c)
		}
	}
	for _, c := range conditions {
		c.ObservedGeneration = obs.generation
		c.LastTransitionTime = now
		meta.SetStatusCondition(&next.Conditions, c)
	}
	if equality.Semantic.DeepEqual(old, next) {
		return next, false
	}
	next.LastUpdateTime = &now
	return next, true
}

// event is one Kubernetes event to record.
type event struct {
	eventType, reason, note string
}

// statusEvents returns the events a status change deserves: a Ready transition (Warning when it is a failure)
// and a summary of the cluster secrets written.
func statusEvents(old, next []metav1.Condition, reg registration) []event {
	var events []event
	if reg.changed() {
		var parts []string
		for _, p := range []struct {
			n    int
			verb string
		}{{reg.created, "registered"}, {reg.updated, "updated"}, {reg.removed, "removed"}, {reg.handedOver, "handed over"}} {
			if p.n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", p.verb, p.n))
			}
		}
		events = append(events, event{eventType: corev1.EventTypeNormal, reason: "ClustersChanged",
			note: "Cluster secrets: " + strings.Join(parts, ", ")})
	}
	before := meta.FindStatusCondition(old, v1alpha1.ConditionReady)
	after := meta.FindStatusCondition(next, v1alpha1.ConditionReady)
	if after != nil && (before == nil || before.Status != after.Status || before.Reason != after.Reason) {
		eventType := corev1.EventTypeNormal
		if after.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		events = append(events, event{eventType: eventType, reason: after.Reason, note: after.Message})
	}
	return events
}
