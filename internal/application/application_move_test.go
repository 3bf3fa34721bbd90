package application

import (
	"testing"

	workv1 "open-cluster-management.io/api/work/v1"
)

// TestOrphaningWork: the work a cluster leaves behind keeps its manifests, orphans them all when deleted, and
// carries the marker instead of the spec hash (so a later copy is never mistaken for it).
func TestOrphaningWork(t *testing.T) {
	desired, err := BuildWork(hubApp(), BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	got := OrphaningWork(desired, "guestbook-1a2b3")
	if got.Name != "guestbook-1a2b3" || got.Namespace != "cluster1" {
		t.Errorf("work %s/%s", got.Namespace, got.Name)
	}
	if got.Spec.DeleteOption == nil || got.Spec.DeleteOption.PropagationPolicy != workv1.DeletePropagationPolicyTypeOrphan ||
		got.Spec.DeleteOption.SelectivelyOrphan != nil {
		t.Errorf("delete option %+v", got.Spec.DeleteOption)
	}
	if got.Annotations[AnnotationOrphan] != "true" || got.Annotations[AnnotationSpecHash] != "" {
		t.Errorf("annotations %v", got.Annotations)
	}
	if len(got.Spec.Workload.Manifests) != len(desired.Spec.Workload.Manifests) {
		t.Errorf("%d manifests, want %d", len(got.Spec.Workload.Manifests), len(desired.Spec.Workload.Manifests))
	}
	if desired.Annotations[AnnotationOrphan] != "" || desired.Spec.DeleteOption.PropagationPolicy == workv1.DeletePropagationPolicyTypeOrphan {
		t.Error("OrphaningWork changed the desired work")
	}
}
