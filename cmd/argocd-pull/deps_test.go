package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTestCodeInTheBinary keeps test code out of the production binary: neither package testing nor the
// project's test-only packages may be among its dependencies.
func TestNoTestCodeInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := map[string]bool{
		"testing": true,
		"github.com/argocd-pull/argocd-pull/internal/testutil":          true,
		"github.com/argocd-pull/argocd-pull/internal/server/servertest": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden[pkg] || strings.HasSuffix(pkg, "/internal/testclients") {
			t.Errorf("the argocd-pull binary links %s, which is test code", pkg)
		}
	}
}
