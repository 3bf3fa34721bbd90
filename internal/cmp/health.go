package cmp

import _ "embed" // the health check ships inside the binary and in config/

// HealthLua is the ManifestWork health check for Argo CD (health.lua): the value of HealthCustomizationKey in
// argocd-cm. It reads the status feedback that BuildWorks asks the work agent for.
//
//go:embed health.lua
var HealthLua string

// HealthCustomizationKey is the argocd-cm key of a ManifestWork health check.
const HealthCustomizationKey = "resource.customizations.health.work.open-cluster-management.io_ManifestWork"

// PluginName is the plugin's name: Applications set spec.source.plugin.name to it.
const PluginName = "argocd-pull"

// PluginConfig is the plugin's plugin.yaml, which argocd-cmp-server reads (config/cmp/plugin.yaml ships it in
// a ConfigMap). It has no discover rule: only Applications that name the plugin become ManifestWorks.
const PluginConfig = `apiVersion: argoproj.io/v1alpha1
kind: ConfigManagementPlugin
metadata:
  name: ` + PluginName + `
spec:
  generate:
    command: [argocd-pull, cmp, generate]
`
