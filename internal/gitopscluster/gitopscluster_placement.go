package gitopscluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
)

// placementResult is what the Placement reference resolved to.
type placementResult struct {
	resolved bool
	// reason and message explain an unresolved reference.
	reason, message string
	// placement is the Placement's namespace/name.
	placement string
	// clusters are the distinct clusters the decisions select, sorted.
	clusters []string
	// decisions is the number of PlacementDecisions read.
	decisions int
}

// validatePlacementRef checks a Placement reference and returns what is wrong with it, or "" if nothing is.
// The Placement must be a cluster.open-cluster-management.io Placement in the GitOpsCluster's namespace.
func validatePlacementRef(ref *corev1.ObjectReference, namespace string) string {
	switch {
	case ref == nil:
		return "spec.placementRef is not set"
	case ref.Name == "":
		return "spec.placementRef.name is not set"
	case ref.Kind != "Placement":
		return fmt.Sprintf("spec.placementRef.kind %q is not supported: only Placement is", ref.Kind)
	case ref.APIVersion != "" && parseGroup(ref.APIVersion) != clusterv1beta1.GroupName:
		return fmt.Sprintf("spec.placementRef.apiVersion %q is not in group %s", ref.APIVersion, clusterv1beta1.GroupName)
	case ref.Namespace != "" && ref.Namespace != namespace:
		return fmt.Sprintf("spec.placementRef.namespace %q differs from the GitOpsCluster's namespace %q: the Placement must be in the same namespace",
			ref.Namespace, namespace)
	}
	return ""
}

func parseGroup(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// decisionClusters returns the distinct non-empty cluster names of the decisions, sorted.
func decisionClusters(decisions []clusterv1beta1.PlacementDecision) []string {
	var clusters []string
	for i := range decisions {
		for _, d := range decisions[i].Status.Decisions {
			if name := strings.TrimSpace(d.ClusterName); name != "" {
				clusters = append(clusters, name)
			}
		}
	}
	slices.Sort(clusters)
	return slices.Compact(clusters)
}

// readPlacement resolves gc's Placement reference and reads the clusters its PlacementDecisions select, from
// the cache. Only a failed read is an error; a bad or dangling reference is an unresolved result.
func (r *Reconciler) readPlacement(ctx context.Context, gc *v1alpha1.GitOpsCluster) (placementResult, error) {
	if msg := validatePlacementRef(gc.Spec.PlacementRef, gc.Namespace); msg != "" {
		return placementResult{reason: v1alpha1.ReasonInvalidPlacementRef, message: msg}, nil
	}
	key := types.NamespacedName{Namespace: gc.Namespace, Name: gc.Spec.PlacementRef.Name}
	res := placementResult{placement: key.String()}
	if err := r.Client.Get(ctx, key, &clusterv1beta1.Placement{}); err != nil {
		if !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("get placement %s: %w", key, err)
		}
		res.reason = v1alpha1.ReasonPlacementNotFound
		res.message = fmt.Sprintf("Placement %s not found", key)
		return res, nil
	}
	list := &clusterv1beta1.PlacementDecisionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(key.Namespace),
		client.MatchingLabels{clusterv1beta1.PlacementLabel: key.Name}); err != nil {
		return res, fmt.Errorf("list placementdecisions of placement %s: %w", key, err)
	}
	res.resolved = true
	res.clusters = decisionClusters(list.Items)
	res.decisions = len(list.Items)
	return res, nil
}

// resolvePlacement is the reconcile step that reads the selected clusters.
func (r *Reconciler) resolvePlacement(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs *observation) error {
	res, err := r.readPlacement(ctx, gc)
	if err != nil {
		return err
	}
	obs.placement = res
	return nil
}
