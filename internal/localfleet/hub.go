package localfleet

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	clusterv1beta2 "open-cluster-management.io/api/cluster/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// PlacementName is the Placement that selects every managed cluster of the fleet.
const PlacementName = "all-clusters"

// The ManagedClusterSets OCM's registration controller keeps on every hub: "default", which a cluster joins
// when no other set claims it, and "global", which holds every cluster.
const (
	DefaultClusterSet = "default"
	GlobalClusterSet  = "global"
)

// HubClient returns a client of the hub; it knows the hub controller's kinds and ManagedClusterSets.
func (f *System) HubClient() (client.Client, error) {
	return client.New(f.Env.Hub.Config(), client.Options{Scheme: hubScheme()})
}

// ClusterClient returns a client of a managed cluster.
func (f *System) ClusterClient(name string) (client.Client, error) {
	return client.New(f.Env.Cluster(name).Config(), client.Options{Scheme: hubmanager.Scheme()})
}

func hubScheme() *runtime.Scheme {
	s := hubmanager.Scheme()
	if err := clusterv1beta2.Install(s); err != nil {
		panic(err)
	}
	return s
}

// prepareHub creates what an OCM hub with Argo CD has: the ManagedClusters and their namespaces as OCM's
// registration leaves them once their agents joined (accepted, joined, available, in the "default" set), the
// "default" and "global" ManagedClusterSets registration keeps, Argo CD's namespace and settings, a binding of
// the "global" set to Argo CD's namespace, a Placement there, and a GitOpsCluster that registers the placed
// clusters with Argo CD. OCM's placement controller, which runs on the hub, decides the Placement; prepareHub
// waits until it has placed every cluster.
func (f *System) prepareHub(ctx context.Context) error {
	f.progress("registering %d managed clusters on the hub: ManagedClusters, ManagedClusterSets, a Placement that OCM's placement controller decides, a GitOpsCluster", len(f.Clusters))
	hub, err := f.HubClient()
	if err != nil {
		return err
	}
	if err := loopback.PrepareArgoCDNamespace(ctx, f.Env.Hub, ArgoCDNamespace, 0); err != nil {
		return err
	}
	objs := []client.Object{
		&clusterv1beta2.ManagedClusterSet{ObjectMeta: metav1.ObjectMeta{Name: DefaultClusterSet},
			Spec: clusterv1beta2.ManagedClusterSetSpec{ClusterSelector: clusterv1beta2.ManagedClusterSelector{
				SelectorType: clusterv1beta2.ExclusiveClusterSetLabel}}},
		&clusterv1beta2.ManagedClusterSet{ObjectMeta: metav1.ObjectMeta{Name: GlobalClusterSet},
			Spec: clusterv1beta2.ManagedClusterSetSpec{ClusterSelector: clusterv1beta2.ManagedClusterSelector{
				SelectorType: clusterv1beta2.LabelSelector, LabelSelector: &metav1.LabelSelector{}}}},
		&clusterv1beta2.ManagedClusterSetBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace, Name: GlobalClusterSet},
			Spec: clusterv1beta2.ManagedClusterSetBindingSpec{ClusterSet: GlobalClusterSet}},
	}
	for _, c := range f.Clusters {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}})
	}
	placement := &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace, Name: PlacementName}}
	gitops := &v1alpha1.GitOpsCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace, Name: GitOpsClusterName},
		Spec: v1alpha1.GitOpsClusterSpec{
			ArgoServer:   v1alpha1.ArgoServerSpec{ArgoNamespace: ArgoCDNamespace},
			PlacementRef: &corev1.ObjectReference{Kind: "Placement", APIVersion: clusterv1beta1.GroupVersion.String(), Name: PlacementName},
		}}
	if f.consoleOn() {
		host, port, _ := net.SplitHostPort(f.Console.KubeProxy)
		gitops.Spec.ArgoCDAgentAddon = &v1alpha1.ArgoCDAgentAddonSpec{PrincipalServerAddress: host, PrincipalServerPort: port}
	}
	objs = append(objs, placement, gitops)
	if err := createAll(ctx, hub, objs); err != nil {
		return err
	}
	if err := registerClusters(ctx, hub, f.Clusters); err != nil {
		return err
	}
	return WaitPlaced(ctx, hub, ArgoCDNamespace, PlacementName, len(f.Clusters))
}

// registerClusters creates the ManagedClusters as OCM's registration leaves a cluster whose agent has joined:
// accepted by the hub, in the "default" ManagedClusterSet, and Joined and Available.
func registerClusters(ctx context.Context, hub client.Client, clusters []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, name := range clusters {
		g.Go(func() error {
			mc := &clusterv1.ManagedCluster{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
					"fleet": "argocd-pull", clusterv1beta2.ClusterSetLabel: DefaultClusterSet}},
				Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true, LeaseDurationSeconds: 60},
			}
			if err := hub.Create(gctx, mc); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create managedcluster %s: %w", name, err)
			}
			if err := hub.Get(gctx, client.ObjectKey{Name: name}, mc); err != nil {
				return fmt.Errorf("get managedcluster %s: %w", name, err)
			}
			for _, c := range []metav1.Condition{
				{Type: clusterv1.ManagedClusterConditionHubAccepted, Status: metav1.ConditionTrue, Reason: "HubClusterAdminAccepted",
					Message: "Accepted by hub cluster admin"},
				{Type: clusterv1.ManagedClusterConditionJoined, Status: metav1.ConditionTrue, Reason: "ManagedClusterJoined",
					Message: "Managed cluster joined"},
				{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue, Reason: "ManagedClusterAvailable",
					Message: "Managed cluster is available"},
			} {
				meta.SetStatusCondition(&mc.Status.Conditions, c)
			}
			mc.Status.Version = clusterv1.ManagedClusterVersion{Kubernetes: "v1.33.4"}
			if err := hub.Status().Update(gctx, mc); err != nil {
				return fmt.Errorf("write status of managedcluster %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// createAll creates objects, 32 at a time.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, o := range objs {
		g.Go(func() error {
			if err := c.Create(gctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// WaitPlaced waits until OCM's placement controller has decided a Placement: it has selected n clusters and
// its PlacementDecisions list them all.
func WaitPlaced(ctx context.Context, hub client.Client, namespace, name string, n int) error {
	return loopback.Poll(ctx, fmt.Sprintf("OCM's placement controller to place %d clusters for Placement %s/%s", n, namespace, name), func(ctx context.Context) error {
		p := &clusterv1beta1.Placement{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
			return err
		}
		if int(p.Status.NumberOfSelectedClusters) != n {
			return fmt.Errorf("%d clusters selected; conditions %v", p.Status.NumberOfSelectedClusters, p.Status.Conditions)
		}
		decisions := &clusterv1beta1.PlacementDecisionList{}
		if err := hub.List(ctx, decisions, client.InNamespace(namespace), client.MatchingLabels{clusterv1beta1.PlacementLabel: name}); err != nil {
			return err
		}
		placed := 0
		for _, d := range decisions.Items {
			placed += len(d.Status.Decisions)
		}
		if placed != n {
			return fmt.Errorf("the PlacementDecisions list %d clusters", placed)
		}
		return nil
	})
}
