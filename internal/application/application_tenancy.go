package application

import (
	"context"
	"fmt"

	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterPermitted reports whether a PlacementDecision in the namespace selects the cluster: the tenancy
// gate. A namespace's teams may deliver only to the clusters placed for that namespace (OCM binds cluster
// sets to namespaces with ManagedClusterSetBindings, and Placements in the namespace choose among them).
func (r *Reconciler) clusterPermitted(ctx context.Context, namespace, cluster string) (bool, error) {
	list := &clusterv1beta1.PlacementDecisionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("list placementdecisions in %s: %w", namespace, err)
	}
	for i := range list.Items {
		if decides(&list.Items[i], cluster) {
			return true, nil
		}
	}
	return false, nil
}

func decides(pd *clusterv1beta1.PlacementDecision, cluster string) bool {
	for _, d := range pd.Status.Decisions {
		if d.ClusterName == cluster {
			return true
		}
	}
	return false
}
