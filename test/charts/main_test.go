package charts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// The charts, relative to this package.
const (
	hubChart   = "../../charts/argocd-pull"
	agentChart = "../../charts/argocd-pull-agent"
)

var (
	// env is the hub (without argocd-pull's CRDs, which the hub chart installs), the managed cluster cluster1
	// and PostgreSQL.
	env *loopback.Env
	// binary is the argocd-pull binary built from this tree; the charts' containers run it.
	binary string
	// workDir holds the binary and the pods' files; it is traversable by the pods' non-root user.
	workDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if workDir, err = os.MkdirTemp("", "argocd-pull-charts-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(workDir) }()
	if err := os.Chmod(workDir, 0o755); err != nil { //nolint:gosec // the pods' user must reach the binary
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	binary, err = loopback.BuildArgocdPull(ctx, workDir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testutil.Main(m, loopback.Options{ManagedClusters: []string{"cluster1"}, Postgres: true, HubWithoutProjectCRDs: true}, &env)
}

// helmBinary is bin/helm, built by `make setup` (hack/helm).
func helmBinary(t *testing.T) string {
	t.Helper()
	path, err := loopback.Binary("helm")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// helm runs the helm binary and returns its standard output, or an error with its standard error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helmBinary(t), args...) //nolint:gosec // the pinned helm binary
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No repositories or plugins of the machine's user: Helm's own directories in the test's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// template renders a chart with a values file (relative to testdata) as release name in namespace ns.
func template(t *testing.T, chart, values, name, ns string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", name, chart, "--namespace", ns, "--values", filepath.Join("testdata", values)}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifests(out)
	if err != nil {
		t.Fatalf("decode the manifests of %s with %s: %v", chart, values, err)
	}
	return objs
}

// decodeManifests splits a multi-document YAML stream into objects, skipping empty documents.
func decodeManifests(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
}
