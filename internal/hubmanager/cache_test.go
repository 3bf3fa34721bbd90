package hubmanager

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestManagedClusterLabels: the controller's cache keeps a ManagedCluster's metadata (its labels above all)
// and drops its spec, status and managedFields.
func TestManagedClusterLabels(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "cluster1", UID: "u1", ResourceVersion: "42",
		Labels:      map[string]string{"local-cluster": "true", "argocd-pull.io/transport": "kube"},
		Annotations: map[string]string{"a": "b"},
	}
	mc := &clusterv1.ManagedCluster{
		ObjectMeta: *meta.DeepCopy(),
		Spec: clusterv1.ManagedClusterSpec{
			HubAcceptsClient:            true,
			ManagedClusterClientConfigs: []clusterv1.ClientConfig{{URL: "https://cluster1:6443"}},
		},
		Status: clusterv1.ManagedClusterStatus{
			Conditions:    []metav1.Condition{{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue}},
			Capacity:      clusterv1.ResourceList{"cpu": resource.MustParse("8")},
			Version:       clusterv1.ManagedClusterVersion{Kubernetes: "v1.33.4"},
			ClusterClaims: []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: "c1"}},
		},
	}
	mc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "registration-agent"}}
	out, err := managedClusterLabels(mc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*clusterv1.ManagedCluster)
	if !reflect.DeepEqual(got.ObjectMeta, meta) {
		t.Errorf("metadata = %+v, want %+v", got.ObjectMeta, meta)
	}
	if !reflect.DeepEqual(got.Spec, clusterv1.ManagedClusterSpec{}) || !reflect.DeepEqual(got.Status, clusterv1.ManagedClusterStatus{}) {
		t.Errorf("spec or status kept: %+v, %+v", got.Spec, got.Status)
	}
	secret := &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	if out, err := managedClusterLabels(secret); err != nil || out != secret || len(secret.Data) != 1 {
		t.Errorf("another kind was changed: %v, %v", out, err)
	}
}

// TestManagedClustersReadWithoutCopy: a Get of a ManagedCluster from the cache shares the cached metadata
// instead of copying it (the reconciler and the router read a cluster's labels at every reconcile); the
// Applications, whose readers modify what they get, are still copied.
func TestManagedClustersReadWithoutCopy(t *testing.T) {
	for _, o := range []*Options{{Transport: "grpc"}, {Transport: "kube", GitOpsCluster: true}} {
		var clusters, apps int
		for obj, by := range cacheByObject(o) {
			switch obj.(type) {
			case *clusterv1.ManagedCluster:
				clusters++
				if !ptr.Deref(by.UnsafeDisableDeepCopy, false) || by.Transform == nil {
					t.Errorf("transport %s: ManagedClusters cached with %+v, want their labels alone, read without a copy", o.Transport, by)
				}
			case *argocd.Application:
				apps++
				if ptr.Deref(by.UnsafeDisableDeepCopy, false) {
					t.Errorf("transport %s: Applications read from the cache without a copy", o.Transport)
				}
			}
		}
		if clusters != 1 || apps != 1 {
			t.Errorf("transport %s: %d ManagedCluster and %d Application entries, want one each", o.Transport, clusters, apps)
		}
	}
}
