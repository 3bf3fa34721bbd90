package gitopscluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) {
	os.Exit(testutil.Main(m, loopback.Options{}, &env))
}

// suite is the controller running in a manager against the test hub, shared by the package's tests; each
// test works in its own namespaces and cluster names.
type suite struct {
	// c reads and writes the hub directly, without a cache.
	c   client.Client
	rec *Reconciler
}

var (
	suiteOnce sync.Once
	theSuite  *suite
	errSuite  error
)

func startSuite(t *testing.T) *suite {
	t.Helper()
	suiteOnce.Do(func() { theSuite, errSuite = newSuite() })
	if errSuite != nil {
		t.Fatal(errSuite)
	}
	return theSuite
}

func newSuite() (*suite, error) {
	ctx := context.Background()
	cfg := env.Hub.Config()
	root, err := loopback.ModuleRoot()
	if err != nil {
		return nil, err
	}
	crd := filepath.Join(root, "config", "crd", "apps.open-cluster-management.io_gitopsclusters.yaml")
	if err := loopback.InstallCRDs(ctx, cfg, []string{crd}); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(env.Dir, "gitopscluster-controller.log"))
	if err != nil {
		return nil, fmt.Errorf("create controller log: %w", err)
	}
	var logMu sync.Mutex
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = fmt.Fprintln(logFile, time.Now().Format(time.StampMicro), prefix, args)
	}, funcr.Options{Verbosity: 1}))

	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: CacheByObject()},
	})
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	rec := &Reconciler{conflictRecheck: time.Second}
	if err := rec.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, errors.New("cache did not sync")
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &suite{c: direct, rec: rec}, nil
}

func (s *suite) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := s.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

func (s *suite) namespace(t *testing.T, name string) {
	t.Helper()
	s.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func (s *suite) placement(t *testing.T, namespace, name string) {
	t.Helper()
	s.create(t, &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
}

// decide writes the clusters into the status of a Placement's PlacementDecision number index, creating it.
func (s *suite) decide(t *testing.T, namespace, placement string, index int, clusters ...string) {
	t.Helper()
	ctx := context.Background()
	key := types.NamespacedName{Namespace: namespace, Name: fmt.Sprintf("%s-decision-%d", placement, index)}
	pd := &clusterv1beta1.PlacementDecision{}
	err := s.c.Get(ctx, key, pd)
	if apierrors.IsNotFound(err) {
		pd = &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{clusterv1beta1.PlacementLabel: placement},
		}}
		err = s.c.Create(ctx, pd)
	}
	if err != nil {
		t.Fatalf("get or create placementdecision %s: %v", key, err)
	}
	pd.Status.Decisions = []clusterv1beta1.ClusterDecision{}
	for _, c := range clusters {
		pd.Status.Decisions = append(pd.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: c})
	}
	if err := s.c.Status().Update(ctx, pd); err != nil {
		t.Fatalf("update placementdecision %s status: %v", key, err)
	}
}

func (s *suite) gitOpsCluster(t *testing.T, namespace, name, placement, argoNamespace string) *v1alpha1.GitOpsCluster {
	t.Helper()
	gc := &v1alpha1.GitOpsCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.GitOpsClusterSpec{
			ArgoServer:   v1alpha1.ArgoServerSpec{ArgoNamespace: argoNamespace},
			PlacementRef: &corev1.ObjectReference{Kind: "Placement", APIVersion: "cluster.open-cluster-management.io/v1beta1", Name: placement},
		},
	}
	s.create(t, gc)
	return gc
}

func (s *suite) managedCluster(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	s.create(t, &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
	})
}

// clusterSecrets returns the clusters of the cluster secrets in a namespace, by name, and the secrets.
func (s *suite) clusterSecrets(t *testing.T, namespace string) ([]string, map[string]corev1.Secret) {
	t.Helper()
	list := &corev1.SecretList{}
	if err := s.c.List(context.Background(), list, client.InNamespace(namespace), client.MatchingLabels{LabelSecretType: SecretTypeCluster}); err != nil {
		t.Fatalf("list secrets in %s: %v", namespace, err)
	}
	var clusters []string
	byCluster := map[string]corev1.Secret{}
	for _, sec := range list.Items {
		clusters = append(clusters, string(sec.Data["name"]))
		byCluster[string(sec.Data["name"])] = sec
	}
	sort.Strings(clusters)
	return clusters, byCluster
}

// ownedClusters returns the clusters of the secrets a GitOpsCluster owns in a namespace.
func (s *suite) ownedClusters(t *testing.T, namespace, owner string) []string {
	t.Helper()
	_, byCluster := s.clusterSecrets(t, namespace)
	var clusters []string
	for c, sec := range byCluster {
		if secretOwner(&sec) == owner {
			clusters = append(clusters, c)
		}
	}
	sort.Strings(clusters)
	return clusters
}

func (s *suite) waitClusters(t *testing.T, namespace, owner string, want ...string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("secrets of %s in %s", owner, namespace), func() error {
		if got := s.ownedClusters(t, namespace, owner); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("clusters %v, want %v", got, want)
		}
		return nil
	})
}

// waitCondition waits until a GitOpsCluster's status is current and has the condition with status and reason,
// and returns the GitOpsCluster.
func (s *suite) waitCondition(t *testing.T, key types.NamespacedName, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.GitOpsCluster {
	t.Helper()
	gc := &v1alpha1.GitOpsCluster{}
	testutil.Eventually(t, fmt.Sprintf("%s %s=%s/%s", key, typ, status, reason), func() error {
		if err := s.c.Get(context.Background(), key, gc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(gc.Status.Conditions, typ)
		switch {
		case gc.Status.ObservedGeneration != gc.Generation:
			return fmt.Errorf("status is of generation %d, not %d", gc.Status.ObservedGeneration, gc.Generation)
		case c == nil:
			return fmt.Errorf("no %s condition in %+v", typ, gc.Status.Conditions)
		case c.Status != status || c.Reason != reason:
			return fmt.Errorf("%s is %s/%s: %s", typ, c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return gc
}

// waitEvent waits for an event of the type and reason on a GitOpsCluster.
func (s *suite) waitEvent(t *testing.T, key types.NamespacedName, eventType, reason string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s event %s on %s", eventType, reason, key), func() error {
		list := &eventsv1.EventList{}
		if err := s.c.List(context.Background(), list, client.InNamespace(key.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == key.Name && e.Regarding.Kind == "GitOpsCluster" {
				if e.Type == eventType && e.Reason == reason {
					return nil
				}
				seen = append(seen, e.Type+"/"+e.Reason)
			}
		}
		return fmt.Errorf("events seen: %v", seen)
	})
}

func (s *suite) get(t *testing.T, obj client.Object) {
	t.Helper()
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("get %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

func (s *suite) update(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("update %T %s", obj, client.ObjectKeyFromObject(obj)), func() error {
		if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return s.c.Update(context.Background(), obj)
	})
}

func (s *suite) delete(t *testing.T, obj client.Object) {
	t.Helper()
	if err := s.c.Delete(context.Background(), obj); err != nil {
		t.Fatalf("delete %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

func (s *suite) waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%T %s gone", obj, client.ObjectKeyFromObject(obj)), func() error {
		err := s.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (finalizers %v)", obj.GetFinalizers())
	})
}
