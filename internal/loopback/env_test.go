package loopback

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestEnv starts a hub, a managed cluster and PostgreSQL, checks that the CRDs serve, that the clusters are
// separate, that the hub's apiserver alone gets the extra environment asked for, and that everything stops.
func TestEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{ManagedClusters: []string{"cluster1"}, Postgres: true, HubAPIServerEnv: []string{hubMemoryLimit}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			env.Stop()
		}
	}()

	apps := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	works := schema.GroupVersionResource{Group: "work.open-cluster-management.io", Version: "v1", Resource: "manifestworks"}
	hub := dynamic.NewForConfigOrDie(env.Hub.Config())
	spoke := dynamic.NewForConfigOrDie(env.Cluster("cluster1").Config())

	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "a", "namespace": "default"},
		"spec":     map[string]any{"project": "default", "destination": map[string]any{"server": "https://x"}, "source": map[string]any{"repoURL": "r"}},
	}}
	if _, err := hub.Resource(apps).Namespace("default").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create application on hub: %v", err)
	}
	if _, err := spoke.Resource(apps).Namespace("default").Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("application visible on the managed cluster: %v", err)
	}
	if _, err := hub.Resource(works).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list manifestworks on hub: %v", err)
	}
	if _, err := spoke.Resource(works).Namespace("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("manifestwork CRD must not be on the managed cluster")
	}

	if !hasEnv(t, env.Hub.Pid(), hubMemoryLimit) {
		t.Errorf("the hub apiserver runs without %s", hubMemoryLimit)
	}
	if hasEnv(t, env.Cluster("cluster1").Pid(), hubMemoryLimit) {
		t.Errorf("the managed cluster's apiserver runs with the hub's %s", hubMemoryLimit)
	}

	conn, err := pgx.Connect(ctx, env.Postgres.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query postgres: %v", err)
	}
	_ = conn.Close(ctx)

	procs := []*Process{env.etcd.proc, env.Hub.proc, env.Cluster("cluster1").proc, env.Postgres.proc}
	env.Stop()
	stopped = true
	for _, p := range procs {
		if p.Running() {
			t.Errorf("%s still running after Stop", p.Name)
		}
	}
}

// hubMemoryLimit is the extra environment TestEnv gives the hub's apiserver.
const hubMemoryLimit = "GOMEMLIMIT=3221225472"

// hasEnv reports whether the process runs with the variable (name=value) in its environment.
func hasEnv(t *testing.T, pid int, variable string) bool {
	t.Helper()
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("read the environment of %d: %v", pid, err)
	}
	return slices.Contains(strings.Split(string(environ), "\x00"), variable)
}
