// Package appstatus turns the status feedback of a ManifestWork (what the work agent reads from the Application
// on the managed cluster) into the hub Application's .status, with conditions for delivery problems. Its
// functions are pure: no API server, no clock.
package appstatus

import (
	workv1 "open-cluster-management.io/api/work/v1"
)

// Names of the scalar feedback values. They come back over every transport, whatever the size of the status.
const (
	FeedbackSyncStatus          = "syncStatus"
	FeedbackHealthStatus        = "healthStatus"
	FeedbackRevision            = "revision"
	FeedbackOperationPhase      = "operationPhase"
	FeedbackOperationStartedAt  = "operationStartedAt"
	FeedbackOperationFinishedAt = "operationFinishedAt"
	FeedbackOperationMessage    = "operationMessage"
	// FeedbackOperationMarker is the value of argocd-pull's entry in the running operation's info: it tells
	// which hub operation the cluster ran (see OperationMarkerInfo).
	FeedbackOperationMarker = "operationMarker"
	// FeedbackUID is the managed cluster's Application's metadata.uid: it tells whether two works (in two
	// transports, during argocd-pull migrate) keep the very same Application, not a re-created one.
	FeedbackUID = "uid"
)

// OperationMarkerInfo names the entry argocd-pull adds to the info of an operation it delivers. Argo CD copies
// the operation, info included, into status.operationState, so the hub knows when the cluster ran that very
// operation, even when an automated sync started in the same second or merged into it.
const OperationMarkerInfo = "argocd-pull.io/operation"

// sectionPrefix prefixes the names of raw-JSON feedback values, one per section of the Application status.
const sectionPrefix = "status."

// Sections are the parts of an Application's .status that come back as raw JSON, one feedback value each.
// Together they are the whole status except reconciledAt and observedAt: those two change on every refresh
// (every three minutes per Application by default) and would turn a fleet at rest into a stream of status
// events. One value per section also lets a small section come back when another one is over the
// transport's size limit.
var Sections = []string{
	"sync",
	"health",
	"operationState",
	"conditions",
	"resources",
	"summary",
	"history",
	"sourceType",
	"sourceTypes",
	"sourceHydrator",
	"resourceHealthSource",
	"controllerNamespace",
}

// FeedbackRules returns the feedback rules of the Application manifest in a work: one rule with the scalar
// fields, one with the raw-JSON sections of the status.
func FeedbackRules() []workv1.FeedbackRule {
	scalar := []workv1.JsonPath{
		{Name: FeedbackSyncStatus, Path: ".status.sync.status"},
		{Name: FeedbackHealthStatus, Path: ".status.health.status"},
		{Name: FeedbackRevision, Path: ".status.sync.revision"},
		{Name: FeedbackOperationPhase, Path: ".status.operationState.phase"},
		{Name: FeedbackOperationStartedAt, Path: ".status.operationState.startedAt"},
		{Name: FeedbackOperationFinishedAt, Path: ".status.operationState.finishedAt"},
		{Name: FeedbackOperationMessage, Path: ".status.operationState.message"},
		{Name: FeedbackOperationMarker, Path: `.status.operationState.operation.info[?(@.name=="` + OperationMarkerInfo + `")].value`},
		{Name: FeedbackUID, Path: ".metadata.uid"},
	}
	raw := make([]workv1.JsonPath, 0, len(Sections))
	for _, s := range Sections {
		raw = append(raw, workv1.JsonPath{Name: sectionPrefix + s, Path: ".status." + s})
	}
	return []workv1.FeedbackRule{
		{Type: workv1.JSONPathsType, JsonPaths: scalar},
		{Type: workv1.JSONPathsType, JsonPaths: raw},
	}
}
