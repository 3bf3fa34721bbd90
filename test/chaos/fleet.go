package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/sim"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Scale is the size of the fleet and of each rollout.
type Scale struct {
	// RealClusters have a kube-apiserver, the OCM work agent and a real Argo CD each, and get RealSets
	// Applications; SimClusters are simulated (argocd-pull sim) and get Sets Applications each.
	RealClusters, RealSets int
	SimClusters, Sets      int
	// SyncDelay is how long a simulated sync takes.
	SyncDelay time.Duration
	// SimArgs and ServerArgs are extra flags of the sim processes and of the server instances (-v=4, say, to
	// follow their events).
	SimArgs, ServerArgs []string
}

// Applications is how many Applications a rollout creates.
func (s Scale) Applications() int { return s.RealClusters*s.RealSets + s.SimClusters*s.Sets }

func (s Scale) String() string {
	return fmt.Sprintf("%d Applications: %d simulated clusters × %d, %d cluster(s) with a real Argo CD × %d",
		s.Applications(), s.SimClusters, s.Sets, s.RealClusters, s.RealSets)
}

// fleet is the fleet under test: two instances of argocd-pull server on one PostgreSQL, the hub controller on
// the second, real clusters with their agents and Argo CD, simulated clusters in one sim process per
// instance, and relays on every link to the servers and to PostgreSQL for the network cuts.
type fleet struct {
	*localfleet.System
	scale   Scale
	hub     client.Client
	real    []string
	simAddr []string
	argocd  []*loopback.ArgoCD
	repoURL string
}

// serverInstances is how many instances of argocd-pull server share the database.
const serverInstances = 2

func startFleet(ctx context.Context, dir, binary string, s Scale, logf func(string, ...any)) (_ *fleet, err error) {
	real := sim.ClusterNames("cluster", 1, s.RealClusters)
	sys, err := localfleet.Start(ctx, localfleet.Options{
		Dir: dir, Clusters: real, Transport: workclient.TransportGRPC, Binary: binary,
		ServerInstances: serverInstances, NetworkFaults: true, ServerArgs: s.ServerArgs,
		Simulator: &localfleet.Simulator{Clusters: s.SimClusters, Args: append([]string{
			"--sync-delay", s.SyncDelay.String(), "--resources-per-app", "4"}, s.SimArgs...)},
		Progress: func(line string) { logf("%s", line) },
	})
	if err != nil {
		return nil, err
	}
	f := &fleet{System: sys, scale: s, real: real, simAddr: sys.SimulatorAddresses()}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if f.hub, err = sys.HubClient(); err != nil {
		return nil, err
	}
	if err := f.startArgoCD(ctx, logf); err != nil {
		return nil, err
	}
	return f, nil
}

// startArgoCD pushes the real clusters' repository and starts a real Argo CD on each of them.
func (f *fleet) startArgoCD(ctx context.Context, logf func(string, ...any)) error {
	if len(f.real) == 0 {
		return nil
	}
	if err := f.Git.Commit(ctx, "chaos", "a ConfigMap", map[string]string{
		"config/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: chaos\ndata:\n  color: blue\n",
	}); err != nil {
		return err
	}
	f.repoURL = f.Git.URL("chaos")
	logf("starting a real Argo CD on %v", f.real)
	f.argocd = make([]*loopback.ArgoCD, len(f.real))
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range f.real {
		g.Go(func() (err error) {
			f.argocd[i], err = loopback.StartArgoCD(gctx, f.Env.Cluster(c), loopback.ArgoCDOptions{
				Dir: filepath.Join(f.Dir, "argocd-"+c), Namespace: localfleet.ArgoCDNamespace, Forward: []string{f.Git.Addr},
				ReconciliationTimeout: 30 * time.Second,
			})
			return err
		})
	}
	return g.Wait()
}

func (f *fleet) stop() {
	for _, a := range f.argocd {
		if a != nil {
			a.Stop()
		}
	}
	f.Stop()
}

// clusters are every managed cluster, real ones first.
func (f *fleet) clusters() []string {
	return append(append([]string(nil), f.real...), sim.ClusterNames("sim", 1, f.scale.SimClusters)...)
}

// rollout is one rollout's ApplicationSets and Applications; prefix sets them apart from other cases'.
type rollout struct {
	prefix string
	sets   []*unstructured.Unstructured
	apps   []plannedApp
}

// plannedApp is an Application of a rollout and the index of its ApplicationSet.
type plannedApp struct {
	*unstructured.Unstructured
	set int
}

// newRollout returns the rollout of a case: ApplicationSets that each generate one Application per simulated
// cluster and, the first RealSets of them, per real cluster, as the ApplicationSet controller would from a
// pull-model template (owned by the set, with Argo CD's resources finalizer). No ApplicationSet controller
// runs: the rollout writes the Applications itself.
func (f *fleet) newRollout(prefix string) *rollout {
	r := &rollout{prefix: prefix}
	for k := range max(f.scale.Sets, f.scale.RealSets) {
		set := &unstructured.Unstructured{}
		set.SetGroupVersionKind(argocd.ApplicationSetGVK)
		set.SetNamespace(localfleet.ArgoCDNamespace)
		set.SetName(prefix + "s" + strconv.Itoa(k))
		set.Object["spec"] = map[string]any{
			"generators": []any{map[string]any{"clusterDecisionResource": map[string]any{
				"configMapRef": "ocm-placement-generator",
				"labelSelector": map[string]any{"matchLabels": map[string]any{
					"cluster.open-cluster-management.io/placement": localfleet.PlacementName}},
			}}},
			"template": map[string]any{"metadata": map[string]any{}, "spec": map[string]any{
				"project": "default", "destination": map[string]any{"server": "{{server}}", "namespace": set.GetName()}}},
		}
		r.sets = append(r.sets, set)
	}
	for _, c := range f.clusters() {
		real := f.isReal(c)
		n := f.scale.Sets
		if real {
			n = f.scale.RealSets
		}
		for k := range n {
			r.apps = append(r.apps, plannedApp{Unstructured: f.application(r.prefix, r.sets[k].GetName(), k, c, real), set: k})
		}
	}
	return r
}

func (f *fleet) isReal(cluster string) bool { return slices.Contains(f.real, cluster) }

// application is the k-th set's Application for a cluster: a ConfigMap from the fleet's git server on a real
// cluster, a repository the simulated Argo CD pretends to read on a simulated one.
func (f *fleet) application(prefix, set string, k int, cluster string, real bool) *unstructured.Unstructured {
	app := argocd.NewApplication()
	app.SetNamespace(localfleet.ArgoCDNamespace)
	app.SetName(prefix + cluster + "-s" + strconv.Itoa(k))
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationSkipReconcile:  "true",
		argocd.AnnotationManagedCluster: cluster,
		argocd.AnnotationAppNamespace:   localfleet.ArgoCDNamespace,
	})
	app.SetFinalizers([]string{argocd.ResourcesFinalizer})
	source := map[string]any{"repoURL": "https://git.example.com/fleet/" + set + ".git", "targetRevision": "main", "path": "apps"}
	if real {
		source = map[string]any{"repoURL": f.repoURL, "targetRevision": "main", "path": "config"}
	}
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      source,
		"destination": map[string]any{"server": "https://" + cluster + ".ocm-pull.invalid", "namespace": set},
		"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}, "syncOptions": []any{"CreateNamespace=true"}},
	}
	return app
}

// createSets creates the rollout's ApplicationSets and makes them the owners of its Applications.
func (f *fleet) createSets(ctx context.Context, r *rollout) error {
	for _, set := range r.sets {
		if err := f.hub.Create(ctx, set); err != nil {
			return fmt.Errorf("create applicationset %s: %w", set.GetName(), err)
		}
	}
	yes := true
	for _, app := range r.apps {
		set := r.sets[app.set]
		app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet",
			Name: set.GetName(), UID: set.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}})
	}
	return nil
}

// deleteSets deletes the rollout's ApplicationSets; the hub's garbage collector deletes their Applications.
func (f *fleet) deleteSets(ctx context.Context, r *rollout) error {
	for _, set := range r.sets {
		if err := f.hub.Delete(ctx, set, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return fmt.Errorf("delete applicationset %s: %w", set.GetName(), err)
		}
	}
	return nil
}
