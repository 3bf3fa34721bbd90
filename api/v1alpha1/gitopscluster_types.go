package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitOpsClusterSpec selects managed clusters through an OCM Placement and names the Argo CD instance they are
// registered with. It accepts the fields the OCM and ACM GitOpsCluster already has; see the field comments for
// which of them the pull model uses.
type GitOpsClusterSpec struct {
	// ArgoServer locates the Argo CD instance the selected clusters are registered with.
	// +optional
	ArgoServer ArgoServerSpec `json:"argoServer,omitempty"`

	// PlacementRef references the Placement whose PlacementDecisions select the clusters. Only kind Placement
	// (cluster.open-cluster-management.io) is supported, and the Placement must be in the GitOpsCluster's namespace.
	PlacementRef *corev1.ObjectReference `json:"placementRef"`

	// ManagedServiceAccountRef is accepted for compatibility with the push model and ignored: in the pull model
	// the hub holds no credentials to the managed clusters.
	// +optional
	ManagedServiceAccountRef string `json:"managedServiceAccountRef,omitempty"`

	// CreateBlankClusterSecrets is accepted for compatibility. The pull model always creates cluster secrets
	// without credentials, whatever its value.
	// +optional
	CreateBlankClusterSecrets *bool `json:"createBlankClusterSecrets,omitempty"`

	// CreatePolicyTemplate is accepted for compatibility and ignored.
	// +optional
	CreatePolicyTemplate *bool `json:"createPolicyTemplate,omitempty"`

	// GitOpsAddon is accepted for compatibility with ACM's GitOpsCluster and ignored by this controller.
	// +optional
	GitOpsAddon *apiextensionsv1.JSON `json:"gitopsAddon,omitempty"`

	// ArgoCDAgentAddon turns on, for the selected clusters, what the argocd-agent addon gives the hub's Argo CD
	// in ACM's advanced pull model: the console. The hub's argocd-server then shows each pulled Application's
	// resource tree, live state, diff, events and logs, read on demand from its cluster through argocd-pull
	// server (the "principal"), over the stream the cluster's agent opened; the hub never dials a managed cluster.
	// The controller keeps a console CA and the proxy's serving certificate in the Argo CD namespace, and gives
	// each cluster secret the proxy as its proxyUrl and a client certificate for that cluster only (rotated
	// before it expires). Its state shows in the ConsoleReady condition.
	// +optional
	ArgoCDAgentAddon *ArgoCDAgentAddonSpec `json:"argoCDAgentAddon,omitempty"`
}

// ArgoCDAgentAddonSpec has the fields of ACM's GitOpsCluster argoCDAgentAddon.
type ArgoCDAgentAddonSpec struct {
	// PrincipalServerAddress is the host the hub's argocd-server reaches argocd-pull server's console proxy at
	// (its --console-proxy-bind-address). Required.
	// +optional
	PrincipalServerAddress string `json:"principalServerAddress,omitempty"`

	// PrincipalServerPort is the port of the console proxy; 443 when empty.
	// +optional
	PrincipalServerPort string `json:"principalServerPort,omitempty"`

	// Mode is accepted for compatibility and ignored: the pull model is argocd-agent's managed mode.
	// +optional
	Mode string `json:"mode,omitempty"`

	// OperatorImage is accepted for compatibility and ignored.
	// +optional
	OperatorImage string `json:"operatorImage,omitempty"`

	// AgentImage is accepted for compatibility and ignored: argocd-pull's agent answers the console.
	// +optional
	AgentImage string `json:"agentImage,omitempty"`

	// Uninstall turns the console off: the cluster secrets lose their proxy and credentials.
	// +optional
	Uninstall bool `json:"uninstall,omitempty"`
}

// ConsoleEnabled reports whether the spec asks for the console.
func (s *GitOpsClusterSpec) ConsoleEnabled() bool {
	return s.ArgoCDAgentAddon != nil && !s.ArgoCDAgentAddon.Uninstall
}

// ArgoServerSpec locates an Argo CD instance.
type ArgoServerSpec struct {
	// Cluster is reserved for naming the cluster Argo CD runs in; it is not used.
	// +optional
	Cluster string `json:"cluster,omitempty"`

	// ArgoNamespace is the namespace Argo CD runs in, where the cluster secrets and the ocm-placement-generator
	// ConfigMap are kept. Defaults to the GitOpsCluster's namespace.
	// +optional
	ArgoNamespace string `json:"argoNamespace,omitempty"`
}

// GitOpsClusterStatus is what the controller last observed.
type GitOpsClusterStatus struct {
	// ObservedGeneration is the generation of the spec this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// SelectedClusters is the number of distinct clusters the Placement's decisions select.
	// +optional
	SelectedClusters int32 `json:"selectedClusters"`

	// RegisteredClusters is the number of selected clusters Argo CD knows through a cluster secret.
	// +optional
	RegisteredClusters int32 `json:"registeredClusters"`

	// Phase is "successful" when Ready is True and "failed" otherwise, as in ACM's GitOpsCluster.
	// +optional
	Phase string `json:"phase,omitempty"`

	// Message repeats the Ready condition's message, as in ACM's GitOpsCluster.
	// +optional
	Message string `json:"message,omitempty"`

	// LastUpdateTime is when the status last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`

	// Conditions are PlacementResolved, ClustersRegistered and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of a GitOpsCluster.
const (
	// ConditionPlacementResolved is True when the Placement reference is valid and the Placement exists.
	ConditionPlacementResolved = "PlacementResolved"
	// ConditionClustersRegistered is True when every selected cluster has a cluster secret in the Argo CD namespace.
	ConditionClustersRegistered = "ClustersRegistered"
	// ConditionConsoleReady is True when the console's CA, the proxy's serving certificate and every registered
	// cluster's console credentials are in place (only with spec.argoCDAgentAddon).
	ConditionConsoleReady = "ConsoleReady"
	// ConditionReady is True when the clusters are registered, the ocm-placement-generator ConfigMap is in place
	// and, when asked for, the console is ready.
	ConditionReady = "Ready"
)

// Condition reasons of a GitOpsCluster.
const (
	// ReasonResolved: the Placement exists and its decisions were read.
	ReasonResolved = "Resolved"
	// ReasonInvalidPlacementRef: the reference names no Placement, another kind, or another namespace.
	ReasonInvalidPlacementRef = "InvalidPlacementRef"
	// ReasonPlacementNotFound: the referenced Placement does not exist.
	ReasonPlacementNotFound = "PlacementNotFound"
	// ReasonPlacementNotResolved: registration waits for the Placement reference to resolve.
	ReasonPlacementNotResolved = "PlacementNotResolved"
	// ReasonArgoNamespaceNotFound: the Argo CD namespace does not exist or is being deleted.
	ReasonArgoNamespaceNotFound = "ArgoNamespaceNotFound"
	// ReasonRegistered: every selected cluster is registered.
	ReasonRegistered = "Registered"
	// ReasonNameConflict: a Secret or Argo CD cluster this GitOpsCluster does not own is in the way.
	ReasonNameConflict = "NameConflict"
	// ReasonRegistrationFailed: writing a cluster secret failed; the controller retries.
	ReasonRegistrationFailed = "RegistrationFailed"
	// ReasonGeneratorConfigMapConflict: the ocm-placement-generator ConfigMap exists, is not managed by the
	// controller, and does not read PlacementDecisions.
	ReasonGeneratorConfigMapConflict = "GeneratorConfigMapConflict"
	// ReasonGeneratorConfigMapFailed: writing the ocm-placement-generator ConfigMap failed; the controller retries.
	ReasonGeneratorConfigMapFailed = "GeneratorConfigMapFailed"
	// ReasonConsoleNotConfigured: spec.argoCDAgentAddon lacks what the console needs (the principal's address).
	ReasonConsoleNotConfigured = "ConsoleNotConfigured"
	// ReasonConsoleCertificatesFailed: the console's CA or serving certificate could not be read or written.
	ReasonConsoleCertificatesFailed = "ConsoleCertificatesFailed"
	// ReasonConsoleIssued: the console's certificates and every registered cluster's credentials are in place.
	ReasonConsoleIssued = "Issued"
	// ReasonReady: the clusters are registered with Argo CD.
	ReasonReady = "Ready"
)

// Phases of a GitOpsCluster, as in ACM's GitOpsCluster.
const (
	PhaseSuccessful = "successful"
	PhaseFailed     = "failed"
)

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=goc
// +kubebuilder:printcolumn:name="Placement",type=string,JSONPath=`.spec.placementRef.name`
// +kubebuilder:printcolumn:name="Argo CD Namespace",type=string,JSONPath=`.spec.argoServer.argoNamespace`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selectedClusters`
// +kubebuilder:printcolumn:name="Registered",type=integer,JSONPath=`.status.registeredClusters`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GitOpsCluster registers the managed clusters an OCM Placement selects with an Argo CD instance, as cluster
// secrets without credentials, so that ApplicationSets can generate Applications for them in the pull model.
type GitOpsCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitOpsClusterSpec   `json:"spec"`
	Status GitOpsClusterStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GitOpsClusterList is a list of GitOpsClusters.
type GitOpsClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitOpsCluster `json:"items"`
}

// ArgoNamespace returns the namespace of the Argo CD instance: spec.argoServer.argoNamespace, or the
// GitOpsCluster's own namespace when that is empty.
func (g *GitOpsCluster) ArgoNamespace() string {
	if g.Spec.ArgoServer.ArgoNamespace != "" {
		return g.Spec.ArgoServer.ArgoNamespace
	}
	return g.Namespace
}

func init() {
	SchemeBuilder.Register(&GitOpsCluster{}, &GitOpsClusterList{})
}
