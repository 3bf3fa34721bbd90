package cmp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The project's config ships what this package defines: the health check in argocd-cm and the plugin.

const healthConfigPath = "../../config/cmp/argocd-cm-health.yaml"

// TestConfigShipsTheHealthCheck: config/cmp/argocd-cm-health.yaml carries health.lua as it is
// (go test ./internal/cmp -run TestConfigShipsTheHealthCheck -update rewrites it).
func TestConfigShipsTheHealthCheck(t *testing.T) {
	if *update {
		var b strings.Builder
		b.WriteString("# The ManifestWork health check for Argo CD (docs/cmp.md), generated from internal/cmp/health.lua\n")
		b.WriteString("# (go test ./internal/cmp -run TestConfigShipsTheHealthCheck -update). Merge it into argocd-cm:\n")
		b.WriteString("#   kubectl -n argocd patch configmap argocd-cm --type merge --patch-file config/cmp/argocd-cm-health.yaml\n")
		b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n  labels:\n    app.kubernetes.io/part-of: argocd\ndata:\n")
		b.WriteString("  " + HealthCustomizationKey + ": |\n")
		for _, line := range strings.Split(strings.TrimSuffix(HealthLua, "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line + "\n")
		}
		if err := os.WriteFile(healthConfigPath, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cm := configMap(t, healthConfigPath)
	if cm.Name != "argocd-cm" || cm.Data[HealthCustomizationKey] != HealthLua {
		t.Errorf("%s does not carry health.lua under %s (run with -update)", healthConfigPath, HealthCustomizationKey)
	}
}

// TestConfigPlugin: the plugin ConfigMap is a ConfigManagementPlugin named argocd-pull that runs
// `argocd-pull cmp generate` and discovers nothing, and the sidecar mounts it where argocd-cmp-server reads it.
func TestConfigPlugin(t *testing.T) {
	cm := configMap(t, "../../config/cmp/plugin.yaml")
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["plugin.yaml"]), &plugin); err != nil {
		t.Fatal(err)
	}
	gen, _ := plugin.Spec["generate"].(map[string]any)
	if plugin.Kind != "ConfigManagementPlugin" || plugin.Metadata.Name != PluginName || gen == nil {
		t.Fatalf("plugin.yaml: %+v", plugin)
	}
	if cmd, _ := yaml.Marshal(gen["command"]); strings.TrimSpace(string(cmd)) != "- argocd-pull\n- cmp\n- generate" {
		t.Errorf("generate command %s", cmd)
	}
	if cm.Data["plugin.yaml"] != PluginConfig {
		t.Errorf("config/cmp/plugin.yaml's plugin.yaml differs from cmp.PluginConfig, which tests and the demo run:\n%s", cm.Data["plugin.yaml"])
	}
	if _, ok := plugin.Spec["discover"]; ok {
		t.Error("the plugin discovers: Applications that do not name it would become ManifestWorks")
	}
	sidecar, err := os.ReadFile(filepath.Join("..", "..", "config", "cmp", "repo-server-sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: " + cm.Name, "mountPath: /home/argocd/cmp-server/config/plugin.yaml", "mountPath: /home/argocd/cmp-server/plugins",
		"command: [/var/run/argocd/argocd-cmp-server]"} {
		if !strings.Contains(string(sidecar), want) {
			t.Errorf("repo-server-sidecar.yaml lacks %q", want)
		}
	}
}

func configMap(t *testing.T, path string) *corev1.ConfigMap {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // G304: the repository's own config
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(data, cm); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cm
}
