// Package e2e runs argocd-pull end to end on loopback with the real binary: real kube-apiservers for the hub
// and the managed clusters, the controller and the agents as processes, and for the ApplicationSet lifecycle
// PostgreSQL, argocd-pull server and a real Argo CD on each managed cluster.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// binary is the argocd-pull binary built from this tree for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "argocd-pull-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	binary, err = loopback.BuildArgocdPull(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startFleet starts a fleet for the test and stops it at the end; a failed test keeps its logs.
func startFleet(t *testing.T, o localfleet.Options) *localfleet.System {
	t.Helper()
	o.Binary = binary
	o.Progress = func(s string) { t.Log(s) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f, err := localfleet.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			f.KeepDir()
			t.Logf("fleet logs kept in %s", f.Dir)
		}
		f.Stop()
	})
	return f
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func nested(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func conditionMessage(app *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

func get(ctx context.Context, c client.Client, obj client.Object, ns, name string) error {
	return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
}
