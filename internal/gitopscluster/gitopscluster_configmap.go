package gitopscluster

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
)

// GeneratorConfigMapName is the ConfigMap through which Argo CD's clusterDecisionResource generator reads
// PlacementDecisions (an ApplicationSet names it in configMapRef).
const GeneratorConfigMapName = "ocm-placement-generator"

// generatorData is what the generator ConfigMap holds: read PlacementDecisions' status.decisions and match
// each decision's clusterName to the name of an Argo CD cluster.
func generatorData() map[string]string {
	return map[string]string{
		"apiVersion":    "cluster.open-cluster-management.io/v1beta1",
		"kind":          "placementdecisions",
		"statusListKey": "decisions",
		"matchKey":      "clusterName",
	}
}

func desiredGeneratorConfigMap(namespace string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      GeneratorConfigMapName,
			Namespace: namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedBy},
		},
		Data: generatorData(),
	}
}

// generatorConfigMapOK reports whether a ConfigMap has the generator's four keys with the expected values.
// Other keys do not matter to the generator.
func generatorConfigMapOK(cm *corev1.ConfigMap) bool {
	for k, v := range generatorData() {
		if cm.Data[k] != v {
			return false
		}
	}
	return true
}

func managedByController(obj metav1.Object) bool { return obj.GetLabels()[LabelManagedBy] == ManagedBy }

// configMapResult is the state of the generator ConfigMap.
type configMapResult struct {
	ok bool
	// reason and message explain a ConfigMap that is not in place.
	reason, message string
}

// syncGeneratorConfigMap makes sure the generator ConfigMap exists in the Argo CD namespace. The ConfigMap is
// shared by every GitOpsCluster of that namespace and often created by users; one the controller did not
// create is used as it is, or reported if it does not read PlacementDecisions.
func (r *Reconciler) syncGeneratorConfigMap(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs *observation) error {
	if !obs.argoNamespaceFound {
		return nil
	}
	namespace := gc.ArgoNamespace()
	key := types.NamespacedName{Namespace: namespace, Name: GeneratorConfigMapName}
	current := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, key, current)
	switch {
	case apierrors.IsNotFound(err):
		err = r.Client.Create(ctx, desiredGeneratorConfigMap(namespace), client.FieldOwner(FieldOwner))
		if !apierrors.IsAlreadyExists(err) {
			obs.configMap = configMapWriteResult(key, "create", err)
			return nil
		}
		if err := r.APIReader.Get(ctx, key, current); err != nil {
			return fmt.Errorf("get configmap %s: %w", key, err)
		}
	case err != nil:
		return fmt.Errorf("get configmap %s: %w", key, err)
	}
	switch {
	case generatorConfigMapOK(current):
		obs.configMap = configMapResult{ok: true}
	case managedByController(current):
		next := current.DeepCopy()
		if next.Data == nil {
			next.Data = map[string]string{}
		}
		maps.Copy(next.Data, generatorData())
		patch := client.MergeFromWithOptions(current, client.MergeFromWithOptimisticLock{})
		obs.configMap = configMapWriteResult(key, "patch", r.Client.Patch(ctx, next, patch, client.FieldOwner(FieldOwner)))
	default:
		obs.configMap = configMapResult{reason: v1alpha1.ReasonGeneratorConfigMapConflict, message: fmt.Sprintf(
			"ConfigMap %s is not managed by argocd-pull and does not read PlacementDecisions (want apiVersion=%s, kind=%s, statusListKey=%s, matchKey=%s)",
			key, generatorData()["apiVersion"], generatorData()["kind"], generatorData()["statusListKey"], generatorData()["matchKey"])}
	}
	return nil
}

func configMapWriteResult(key types.NamespacedName, verb string, err error) configMapResult {
	if err != nil {
		return configMapResult{reason: v1alpha1.ReasonGeneratorConfigMapFailed, message: fmt.Sprintf("%s configmap %s: %v", verb, key, err)}
	}
	return configMapResult{ok: true}
}

// releaseGeneratorConfigMap deletes the generator ConfigMap when the controller created it and no other
// GitOpsCluster uses the namespace.
func (r *Reconciler) releaseGeneratorConfigMap(ctx context.Context, gc *v1alpha1.GitOpsCluster) error {
	namespace := gc.ArgoNamespace()
	users := &v1alpha1.GitOpsClusterList{}
	if err := r.Client.List(ctx, users, client.MatchingFields{indexArgoNamespace: namespace}); err != nil {
		return fmt.Errorf("list gitopsclusters of argo cd namespace %s: %w", namespace, err)
	}
	for i := range users.Items {
		if other := &users.Items[i]; other.UID != gc.UID && other.DeletionTimestamp.IsZero() {
			return nil
		}
	}
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: namespace, Name: GeneratorConfigMapName}
	if err := r.Client.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get configmap %s: %w", key, err)
	}
	if !managedByController(cm) {
		return nil
	}
	pre := metav1.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion}
	if err := r.Client.Delete(ctx, cm, &client.DeleteOptions{Preconditions: &pre}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete configmap %s: %w", key, err)
	}
	return nil
}
