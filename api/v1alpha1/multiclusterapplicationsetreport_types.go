package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelHostingAppSet labels a MulticlusterApplicationSetReport with the ApplicationSet it reports on, as
// "<namespace>.<name>" cut to 63 characters (the value ACM writes; a label value cannot hold a slash).
const LabelHostingAppSet = "apps.open-cluster-management.io/hosting-applicationset"

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=appsetreport;appsetreports
// +kubebuilder:printcolumn:name="Clusters",type=string,JSONPath=`.statuses.summary.clusters`
// +kubebuilder:printcolumn:name="Synced",type=string,JSONPath=`.statuses.summary.synced`
// +kubebuilder:printcolumn:name="Not Synced",type=string,JSONPath=`.statuses.summary.notSynced`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.statuses.summary.healthy`
// +kubebuilder:printcolumn:name="Not Healthy",type=string,JSONPath=`.statuses.summary.notHealthy`
// +kubebuilder:printcolumn:name="In Progress",type=string,JSONPath=`.statuses.summary.inProgress`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MulticlusterApplicationSetReport reports the state of the Applications an ApplicationSet generated for the
// pull model: counts of the clusters in each sync and health state, the clusters that need attention with
// their errors and warnings, and the resources the ApplicationSet deploys. It has the name and namespace of
// its ApplicationSet and the fields of ACM's report of the same kind; the fields marked as argocd-pull's are
// additions. See docs/report.md for how the report is compacted on large fleets.
type MulticlusterApplicationSetReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Statuses is the report. It is a top-level field (not a status subresource), as in ACM.
	// +optional
	Statuses AppConditions `json:"statuses,omitempty"`
}

// +kubebuilder:object:root=true

// MulticlusterApplicationSetReportList is a list of MulticlusterApplicationSetReports.
type MulticlusterApplicationSetReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MulticlusterApplicationSetReport `json:"items"`
}

// AppConditions is the state of every Application of an ApplicationSet.
type AppConditions struct {
	// Resources are the resources the ApplicationSet deploys: the union over its Applications of the resources
	// their managed clusters report, sorted by name, kind, namespace and API version.
	// +optional
	Resources []ResourceRef `json:"resources,omitempty"`

	// ClusterConditions has one entry per Application, sorted by cluster and Application. When the
	// ApplicationSet has more Applications than the report lists, Applications that are Synced and Healthy
	// without conditions are only counted in the summary, and the others are listed most severe first up to
	// the report's limits; omittedClusterConditions counts the ones left out.
	// +optional
	ClusterConditions []ClusterCondition `json:"clusterConditions,omitempty"`

	// Summary counts the Applications in each state.
	// +optional
	Summary ReportSummary `json:"summary,omitempty"`

	// OmittedClusterConditions is the number of Applications that are not Synced and Healthy (or have
	// conditions) and that clusterConditions leaves out to keep the report small (argocd-pull).
	// +optional
	OmittedClusterConditions int32 `json:"omittedClusterConditions,omitempty"`

	// OmittedResources is the number of resources that resources leaves out to keep the report small
	// (argocd-pull).
	// +optional
	OmittedResources int32 `json:"omittedResources,omitempty"`
}

// ResourceRef identifies a resource an Application deploys.
type ResourceRef struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// AppCondition is an error or warning of an Application: one of its status.conditions.
type AppCondition struct {
	// Type is the condition's type; Argo CD's and argocd-pull's types end in "Error" or "Warning".
	// +optional
	Type string `json:"type,omitempty"`

	// Message is the condition's message, cut to the report's message limit.
	// +optional
	Message string `json:"message,omitempty"`
}

// ClusterCondition is the state of one Application of the ApplicationSet on its managed cluster.
type ClusterCondition struct {
	// Cluster is the managed cluster the Application is delivered to.
	// +optional
	Cluster string `json:"cluster,omitempty"`

	// SyncStatus is the Application's sync status (Synced, OutOfSync, Unknown).
	// +optional
	SyncStatus string `json:"syncStatus,omitempty"`

	// HealthStatus is the Application's health status (Healthy, Progressing, Degraded, Suspended, Missing,
	// Unknown).
	// +optional
	HealthStatus string `json:"healthStatus,omitempty"`

	// OperationStateStartedAt is when the Application's last sync operation started (RFC 3339).
	// +optional
	OperationStateStartedAt string `json:"operationStateStartedAt,omitempty"`

	// OperationStatePhase is the phase of the Application's last sync operation (Running, Succeeded, Failed,
	// Error, Terminating).
	// +optional
	OperationStatePhase string `json:"operationStatePhase,omitempty"`

	// SyncRevision is the revision the Application is synced to.
	// +optional
	SyncRevision string `json:"syncRevision,omitempty"`

	// App is "<namespace>/<hub Application>/<cluster>/<work>", as in ACM: the hub Application's namespace and
	// name, and the namespace and name of the work that delivers it.
	// +optional
	App string `json:"app,omitempty"`

	// HubApplication is the name of the hub Application, in the report's namespace (argocd-pull).
	// +optional
	HubApplication string `json:"hubApplication,omitempty"`

	// Message says why the Application is not Synced and Healthy when its conditions do not: the message of a
	// failed sync operation or of its health, cut to the report's message limit (argocd-pull).
	// +optional
	Message string `json:"message,omitempty"`

	// Conditions are the Application's status conditions (errors and warnings), at most a few per entry.
	// +optional
	Conditions []AppCondition `json:"conditions,omitempty"`
}

// ReportSummary counts the Applications of an ApplicationSet in each state. The counts are decimal strings, as
// in ACM. An Application counts as synced or notSynced, and as healthy or notHealthy; Progressing ones count
// as notHealthy and inProgress.
type ReportSummary struct {
	// Synced is the number of Applications whose sync status is Synced.
	// +optional
	Synced string `json:"synced"`

	// NotSynced is the number of Applications whose sync status is anything else (or not reported yet).
	// +optional
	NotSynced string `json:"notSynced"`

	// Healthy is the number of Applications whose health status is Healthy.
	// +optional
	Healthy string `json:"healthy"`

	// NotHealthy is the number of Applications whose health status is anything else (or not reported yet).
	// +optional
	NotHealthy string `json:"notHealthy"`

	// InProgress is the number of Applications whose health status is Progressing.
	// +optional
	InProgress string `json:"inProgress"`

	// Clusters is the number of distinct managed clusters the ApplicationSet's Applications are delivered to.
	// +optional
	Clusters string `json:"clusters"`

	// Applications is the number of Applications; it differs from clusters only when an ApplicationSet
	// generates several Applications for one cluster (argocd-pull).
	// +optional
	Applications string `json:"applications,omitempty"`
}

func init() {
	SchemeBuilder.Register(&MulticlusterApplicationSetReport{}, &MulticlusterApplicationSetReportList{})
}
