// Package v1alpha1 holds argocd-pull's API types in the apps.open-cluster-management.io group, the group the
// existing OCM and ACM GitOpsCluster and MulticlusterApplicationSetReport kinds use.
//
// +kubebuilder:object:generate=true
// +groupName=apps.open-cluster-management.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the API types in this package.
	GroupVersion = schema.GroupVersion{Group: "apps.open-cluster-management.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API types in this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API types in this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
