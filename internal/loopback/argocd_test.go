package loopback_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// TestArgoCD: a managed cluster's real Argo CD syncs an Application from the loopback git server.
func TestArgoCD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := loopback.Start(ctx, loopback.Options{ManagedClusters: []string{"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	git, err := loopback.StartGitServer(env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer git.Stop()
	err = git.Commit(ctx, "apps", "guestbook", map[string]string{
		"guestbook/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guestbook\ndata:\n  color: blue\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Cluster("c1")
	argo, err := loopback.StartArgoCD(ctx, c, loopback.ArgoCDOptions{Dir: filepath.Join(env.Dir, "argocd-c1"), Forward: []string{git.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer argo.Stop()

	apps := dynamic.NewForConfigOrDie(c.Config()).Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"})
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "guestbook", "namespace": "argocd"},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": git.URL("apps"), "path": "guestbook", "targetRevision": "main"},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"},
			"syncPolicy":  map[string]any{"automated": map[string]any{}},
		},
	}}
	if _, err := apps.Namespace("argocd").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(c.Config())
	testutil.EventuallyWithin(t, 2*time.Minute, "guestbook synced", func() error {
		got, err := apps.Namespace("argocd").Get(ctx, "guestbook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sync, _, _ := unstructured.NestedString(got.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(got.Object, "status", "health", "status")
		_, cmErr := kube.CoreV1().ConfigMaps("default").Get(ctx, "guestbook", metav1.GetOptions{})
		if sync == "Synced" && health == "Healthy" && cmErr == nil {
			return nil
		}
		return fmt.Errorf("not synced: sync=%q health=%q configmap=%v status=%v", sync, health, cmErr, got.Object["status"])
	})
}
