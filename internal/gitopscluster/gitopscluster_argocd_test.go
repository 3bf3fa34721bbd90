package gitopscluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// pullAppSet is an ApplicationSet written for the OCM pull model: the clusterDecisionResource generator reads
// the Placement's decisions through ocm-placement-generator and generates for the clusters Argo CD knows.
const pullAppSet = `{"apiVersion":"argoproj.io/v1alpha1","kind":"ApplicationSet","metadata":{"namespace":"argocd","name":"guestbook"},
"spec":{"generators":[{"clusterDecisionResource":{"configMapRef":"ocm-placement-generator",
    "labelSelector":{"matchLabels":{"cluster.open-cluster-management.io/placement":"all"}},"requeueAfterSeconds":5}}],
  "template":{"metadata":{"name":"{{name}}-guestbook","labels":{"apps.open-cluster-management.io/pull-to-ocm-managed-cluster":"true"},
    "annotations":{"argocd.argoproj.io/skip-reconcile":"true","apps.open-cluster-management.io/ocm-managed-cluster":"{{name}}"}},
    "spec":{"project":"default","source":{"repoURL":"https://git.example.com/guestbook.git","targetRevision":"HEAD","path":"guestbook"},
      "destination":{"server":"{{server}}","namespace":"guestbook"}}}}}`

// TestApplicationSetGeneratesForRegisteredClusters runs Argo CD's real ApplicationSet controller against the
// secrets and ConfigMap the controller writes: it generates one Application per selected cluster, with the
// secret's server URL, and drops the Application of a cluster that leaves the decisions.
func TestApplicationSetGeneratesForRegisteredClusters(t *testing.T) {
	s := startSuite(t)
	ctx := context.Background()
	ns := "argocd"
	s.namespace(t, ns)
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	s.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-cm", Labels: partOf}})
	s.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-secret", Labels: partOf}})
	s.create(t, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"namespace": ns, "name": "default"},
		"spec": map[string]any{
			"sourceRepos":  []any{"*"},
			"destinations": []any{map[string]any{"server": "*", "namespace": "*"}},
		},
	}})
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "as-c1", "as-c2")
	s.gitOpsCluster(t, ns, "gc", "all", ns)
	s.waitClusters(t, ns, ns+"/gc", "as-c1", "as-c2")

	startApplicationSetController(t, ns)
	appset := &unstructured.Unstructured{}
	if err := appset.UnmarshalJSON([]byte(pullAppSet)); err != nil {
		t.Fatal(err)
	}
	s.create(t, appset)

	applications := func() (string, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("argoproj.io/v1alpha1")
		list.SetKind("ApplicationList")
		if err := s.c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return "", err
		}
		var apps []string
		for _, a := range list.Items {
			server, _, _ := unstructured.NestedString(a.Object, "spec", "destination", "server")
			apps = append(apps, fmt.Sprintf("%s->%s@%s", a.GetName(), a.GetAnnotations()["apps.open-cluster-management.io/ocm-managed-cluster"], server))
		}
		slices.Sort(apps)
		return strings.Join(apps, " "), nil
	}
	waitApplications := func(want string) {
		t.Helper()
		testutil.EventuallyWithin(t, time.Minute, "applications generated", func() error {
			got, err := applications()
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("applications %q, want %q", got, want)
			}
			return nil
		})
	}
	waitApplications("as-c1-guestbook->as-c1@https://as-c1.ocm-pull.invalid as-c2-guestbook->as-c2@https://as-c2.ocm-pull.invalid")

	s.decide(t, ns, "all", 1, "as-c2")
	waitApplications("as-c2-guestbook->as-c2@https://as-c2.ocm-pull.invalid")
}

// startApplicationSetController starts Argo CD's ApplicationSet controller for a namespace of the test hub.
func startApplicationSetController(t *testing.T, namespace string) {
	t.Helper()
	kubeconfig, err := env.Hub.WriteKubeconfig("admin")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := loopback.Binary("argocd-applicationset-controller")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	dir := filepath.Join(env.Dir, "applicationset-controller")
	p, err := loopback.StartProcess(loopback.ProcessSpec{
		Name: "argocd-applicationset-controller",
		Path: bin,
		Args: []string{"--kubeconfig", kubeconfig, "--namespace", namespace,
			"--metrics-addr", addr(0), "--probe-addr", addr(1), "--webhook-addr", addr(2)},
		Env:     []string{"KUBECONFIG=" + kubeconfig},
		Dir:     env.Dir,
		LogPath: filepath.Join(dir, "log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
}
