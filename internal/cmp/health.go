package cmp

import _ "embed" // the health check ships inside the binary and in config/

// HealthLua is the ManifestWork health check for Argo CD (health.lua): the value of HealthCustomizationKey in
// argocd-cm. It reads the status feedback that BuildWorks asks the work agent for.
//
//go:embed health.lua
var HealthLua string

// HealthCustomizationKey is the argocd-cm key of a ManifestWork health check.
const HealthCustomizationKey = "resource.customizations.health.work.open-cluster-management.io_ManifestWork"
