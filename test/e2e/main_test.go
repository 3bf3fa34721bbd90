// Package e2e runs argocd-pull end to end on loopback: real kube-apiservers for the hub and the managed
// clusters, the argocd-pull binary's controller and agents as processes, and, for the Maestro mode,
// PostgreSQL, the server and real Argo CD on each managed cluster.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/controller"
	"github.com/argocd-pull/argocd-pull/internal/testenv"
)

var (
	env *testenv.Env
	// binary is the argocd-pull binary built from this tree.
	binary string
)

func TestMain(m *testing.M) {
	code := testenv.Main(m, testenv.Options{ManagedClusters: []string{"cluster1", "cluster2"}, GarbageCollector: true}, &env)
	os.Exit(code)
}

func setupBinary(t *testing.T) {
	t.Helper()
	if binary != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := testenv.BuildArgocdPull(ctx, env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	binary = b
}

// run starts the argocd-pull binary with a subcommand until the test ends.
func run(t *testing.T, name string, args ...string) *testenv.Process {
	t.Helper()
	setupBinary(t)
	p, err := testenv.StartProcess(testenv.ProcessSpec{
		Name:    name,
		Path:    binary,
		Args:    args,
		LogPath: filepath.Join(env.Dir, "logs", fmt.Sprintf("%s-%s.log", t.Name(), name)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

func clientFor(t *testing.T, c *testenv.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.Config(), client.Options{Scheme: controller.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func ensureNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually polls f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func nested(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}
