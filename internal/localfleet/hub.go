package localfleet

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// PlacementName is the Placement that selects every managed cluster of the fleet.
const PlacementName = "all-clusters"

// HubClient returns a client of the hub.
func (f *System) HubClient() (client.Client, error) {
	return client.New(f.Env.Hub.Config(), client.Options{Scheme: hubmanager.Scheme()})
}

// ClusterClient returns a client of a managed cluster.
func (f *System) ClusterClient(name string) (client.Client, error) {
	return client.New(f.Env.Cluster(name).Config(), client.Options{Scheme: hubmanager.Scheme()})
}

// prepareHub creates what an OCM hub with Argo CD has: the ManagedClusters and their namespaces, Argo CD's
// namespace and settings, a Placement of every cluster with its PlacementDecision (no OCM placement
// scheduler runs here, so the fleet writes the decision it would make), and a GitOpsCluster that registers
// the placed clusters with Argo CD.
func (f *System) prepareHub(ctx context.Context) error {
	f.progress("registering %d managed clusters on the hub: ManagedClusters, a Placement and a GitOpsCluster", len(f.Clusters))
	hub, err := f.HubClient()
	if err != nil {
		return err
	}
	if err := loopback.PrepareArgoCDNamespace(ctx, f.Env.Hub, ArgoCDNamespace, 0); err != nil {
		return err
	}
	objs := []client.Object{}
	for _, c := range f.Clusters {
		objs = append(objs,
			&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: c, Labels: map[string]string{"fleet": "argocd-pull"}},
				Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}})
	}
	placement := &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace, Name: PlacementName}}
	gitops := &v1alpha1.GitOpsCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace, Name: "argocd-pull"},
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
	return writeDecisions(ctx, hub, f.Clusters)
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

// decisionsPerObject is how many clusters OCM's placement controller puts in one PlacementDecision.
const decisionsPerObject = 100

// writeDecisions writes the Placement's decisions as OCM's placement controller would: PlacementDecisions of
// at most 100 clusters each, labelled with the Placement.
func writeDecisions(ctx context.Context, hub client.Client, clusters []string) error {
	for i := 0; i*decisionsPerObject < len(clusters); i++ {
		pd := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{Namespace: ArgoCDNamespace,
			Name:   fmt.Sprintf("%s-decision-%d", PlacementName, i+1),
			Labels: map[string]string{clusterv1beta1.PlacementLabel: PlacementName, clusterv1beta1.DecisionGroupIndexLabel: "0"}}}
		if err := hub.Create(ctx, pd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create placement decision %s: %w", pd.Name, err)
		}
		for _, c := range clusters[i*decisionsPerObject : min((i+1)*decisionsPerObject, len(clusters))] {
			pd.Status.Decisions = append(pd.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: c, Reason: "fleet"})
		}
		if err := hub.Status().Update(ctx, pd); err != nil {
			return fmt.Errorf("write placement decision %s: %w", pd.Name, err)
		}
	}
	return nil
}
