package application_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) {
	os.Exit(testutil.Main(m, loopback.Options{ControllerLog: true}, &env))
}

// hubClient is a direct (uncached) client of the hub.
func hubClient(t *testing.T) client.Client {
	t.Helper()
	return testutil.Client(t, env.Hub.Config(), hubmanager.Scheme())
}

// startController runs the hub controllers with the kube transport until the test ends or the returned stop
// is called.
func startController(t *testing.T, mutate ...func(*hubmanager.Options)) (stop func()) {
	t.Helper()
	return startControllerOn(t, env.Hub.Config(), mutate...)
}

// startControllerOn is startController with the controllers' own client configuration.
func startControllerOn(t *testing.T, cfg *rest.Config, mutate ...func(*hubmanager.Options)) (stop func()) {
	t.Helper()
	opts := hubmanager.NewOptions()
	opts.MetricsAddress, opts.HealthAddress = "0", "0"
	opts.Application.UnknownClusterRetry = time.Second
	opts.StartedMoreThanOnce = true
	for _, m := range mutate {
		m(opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := hubmanager.New(ctx, cfg, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

var seq atomic.Int32

// names returns a fresh application namespace and cluster name for a test.
func names(t *testing.T) (string, string) {
	t.Helper()
	n := seq.Add(1)
	return fmt.Sprintf("apps-%d", n), fmt.Sprintf("cluster-%d", n)
}

// placeClusters creates a PlacementDecision in namespace ns that selects the clusters.
func placeClusters(t *testing.T, c client.Client, ns string, clusters ...string) *clusterv1beta1.PlacementDecision {
	t.Helper()
	ctx := context.Background()
	pd := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: "placement-decision-1",
		Labels: map[string]string{clusterv1beta1.PlacementLabel: "placement"},
	}}
	if err := c.Create(ctx, pd); err != nil {
		t.Fatal(err)
	}
	for _, cl := range clusters {
		pd.Status.Decisions = append(pd.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: cl})
	}
	if err := c.Status().Update(ctx, pd); err != nil {
		t.Fatal(err)
	}
	return pd
}

// setup creates an application namespace, a cluster namespace on the hub and a placement that selects it.
func setup(t *testing.T, c client.Client) (ns, cluster string) {
	t.Helper()
	ns, cluster = names(t)
	testutil.CreateNamespace(t, c, ns)
	testutil.CreateNamespace(t, c, cluster)
	placeClusters(t, c, ns, cluster)
	return ns, cluster
}

func newApp(ns, name, cluster string) *unstructured.Unstructured {
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: cluster, argocd.AnnotationSkipReconcile: "true"})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
	}
	return app
}

func createApp(t *testing.T, c client.Client, app *unstructured.Unstructured) {
	t.Helper()
	if err := c.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
}

func getApp(t *testing.T, c client.Client, ns, name string) *unstructured.Unstructured {
	t.Helper()
	app := argocd.NewApplication()
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, app); err != nil {
		t.Fatal(err)
	}
	return app
}

func getWork(c client.Client, cluster, ns, app string) (*workv1.ManifestWork, error) {
	w := &workv1.ManifestWork{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: cluster, Name: application.WorkName(ns, app)}, w)
	return w, err
}

// condition returns the message of the Application condition of the given type, or "".
func condition(app *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			msg, _ := m["message"].(string)
			return msg
		}
	}
	return ""
}

func expectCondition(t *testing.T, c client.Client, ns, name, typ, substr string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("condition %s on %s/%s", typ, ns, name), func() error {
		msg := condition(getApp(t, c, ns, name), typ)
		if !strings.Contains(msg, substr) || msg == "" {
			return fmt.Errorf("condition %s = %q, want it to contain %q", typ, msg, substr)
		}
		return nil
	})
}

// payloadApp returns the Application manifest of a work.
func payloadApp(t *testing.T, w *workv1.ManifestWork) *unstructured.Unstructured {
	t.Helper()
	for _, m := range w.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(m.Raw); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() == "Application" {
			return u
		}
	}
	t.Fatal("work has no Application")
	return nil
}

// warningEvents returns the reasons of the Warning events about an object.
func warningEvents(t *testing.T, c client.Client, ns, name string) []string {
	t.Helper()
	list := &corev1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.Type == corev1.EventTypeWarning {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// updateApp changes an Application on its latest version, retrying on conflicts with the controller's writes.
func updateApp(t *testing.T, c client.Client, ns, name string, mutate func(*unstructured.Unstructured)) {
	t.Helper()
	testutil.Eventually(t, "update application "+name, func() error {
		app := getApp(t, c, ns, name)
		mutate(app)
		return c.Update(context.Background(), app)
	})
}
