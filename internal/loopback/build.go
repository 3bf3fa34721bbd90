package loopback

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildArgocdPull builds the argocd-pull binary from this repository into dir and returns its path, so that
// end-to-end tests run the real binary as it is now.
func BuildArgocdPull(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "argocd-pull")
	// The tag keeps kustomize's Go-plugin loader (package plugin) out, as the Makefile's build does.
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "kustomize_disable_go_plugin_support", "-o", out, "./cmd/argocd-pull") //nolint:gosec // go build of this repository
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build argocd-pull: %w: %s", err, b)
	}
	return out, nil
}
