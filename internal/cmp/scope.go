package cmp

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// clusterScopedKinds are the cluster-scoped kinds of Kubernetes itself and of OCM, by group. The plugin renders
// offline (it never asks the managed cluster's API), so it needs a table to tell whether an object without a
// namespace is cluster-scoped or a mistake. CustomResourceDefinitions among the rendered manifests and the
// --cluster-scoped-kinds flag extend it.
var clusterScopedKinds = map[string][]string{
	"":                             {"Namespace", "Node", "PersistentVolume", "ComponentStatus"},
	"admissionregistration.k8s.io": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"},
	"apiextensions.k8s.io":         {"CustomResourceDefinition"},
	"apiregistration.k8s.io":       {"APIService"},
	"certificates.k8s.io":          {"CertificateSigningRequest", "ClusterTrustBundle"},
	"flowcontrol.apiserver.k8s.io": {"FlowSchema", "PriorityLevelConfiguration"},
	"internal.apiserver.k8s.io":    {"StorageVersion"},
	"networking.k8s.io":            {"IngressClass", "IPAddress", "ServiceCIDR"},
	"node.k8s.io":                  {"RuntimeClass"},
	"rbac.authorization.k8s.io":    {"ClusterRole", "ClusterRoleBinding"},
	"resource.k8s.io":              {"DeviceClass", "ResourceSlice", "DeviceTaintRule"},
	"scheduling.k8s.io":            {"PriorityClass"},
	"storage.k8s.io":               {"StorageClass", "CSIDriver", "CSINode", "VolumeAttachment", "VolumeAttributesClass"},
	"storagemigration.k8s.io":      {"StorageVersionMigration"},
	// Review kinds: create-only, never stored, but cluster-scoped all the same.
	"authentication.k8s.io": {"TokenReview", "SelfSubjectReview"},
	"authorization.k8s.io":  {"SubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview"},
	// Open Cluster Management.
	"cluster.open-cluster-management.io":  {"ManagedCluster", "ManagedClusterSet", "ClusterClaim"},
	"addon.open-cluster-management.io":    {"ClusterManagementAddOn", "AddOnTemplate"},
	"operator.open-cluster-management.io": {"ClusterManager", "Klusterlet"},
	"work.open-cluster-management.io":     {"AppliedManifestWork"},
}

// Kinds knows, for the kinds the plugin renders, whether they are cluster-scoped and their resource name (the
// plural a ManifestWork's resource identifiers use).
type Kinds struct {
	cluster   map[schema.GroupKind]bool
	resources map[schema.GroupKind]string
}

// NewKinds returns the built-in table extended by extra cluster-scoped kinds, each written "Kind" (core group)
// or "Kind.group", as kubectl writes them.
func NewKinds(extraClusterScoped []string) (*Kinds, error) {
	k := &Kinds{cluster: map[schema.GroupKind]bool{}, resources: map[schema.GroupKind]string{}}
	for group, kinds := range clusterScopedKinds {
		for _, kind := range kinds {
			k.cluster[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	for _, e := range extraClusterScoped {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		gk := schema.ParseGroupKind(e)
		if gk.Kind == "" || strings.ContainsAny(gk.Kind, "/ ") {
			return nil, fmt.Errorf("cluster-scoped kind %q: write it as Kind or Kind.group", e)
		}
		k.cluster[gk] = true
	}
	return k, nil
}

// AddFromCRD records the scope and resource name a CustomResourceDefinition among the manifests declares.
func (k *Kinds) AddFromCRD(u *unstructured.Unstructured) {
	if u.GetKind() != "CustomResourceDefinition" || u.GroupVersionKind().Group != "apiextensions.k8s.io" {
		return
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
	if kind == "" {
		return
	}
	gk := schema.GroupKind{Group: group, Kind: kind}
	k.cluster[gk] = scope == "Cluster"
	if plural != "" {
		k.resources[gk] = plural
	}
}

// ClusterScoped reports whether objects of the kind are cluster-scoped. Kinds the table does not know are
// namespaced, as most custom resources are.
func (k *Kinds) ClusterScoped(gk schema.GroupKind) bool {
	return k.cluster[gk]
}

// Resource returns the resource name of a kind: the one a CRD among the manifests declares, or the
// conventional lower-case plural every built-in kind follows.
func (k *Kinds) Resource(gk schema.GroupKind) string {
	if r, ok := k.resources[gk]; ok {
		return r
	}
	plural, _ := meta.UnsafeGuessKindToResource(gk.WithVersion(""))
	return plural.Resource
}
