package argocd_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// hubApplication is the JSON of the i-th of the Applications that 50 ApplicationSets generate for clusters of
// 50 (the benchmark's fleet), Synced and Healthy with four resources, as the apiserver sends it to the
// controller's cache.
func hubApplication(i int) []byte {
	cluster, set := fmt.Sprintf("cluster%d", i/50), fmt.Sprintf("set-%02d", i%50)
	name := cluster + "-" + set
	at := "2026-11-26T10:00:00Z"
	source := map[string]any{"repoURL": "https://git.example.com/fleet/" + set + ".git", "targetRevision": "main", "path": "apps/" + set}
	revision := fmt.Sprintf("%040x", i%50)
	var resources []any
	for r := range 4 {
		resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": set,
			"name": fmt.Sprintf("%s-%d", name, r), "status": "Synced"})
	}
	yes := true
	app := map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": name, "namespace": "argocd", "uid": fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			"resourceVersion": fmt.Sprint(100000 + i), "generation": 1, "creationTimestamp": at,
			"labels": map[string]any{argocd.LabelPull: "true"},
			"annotations": map[string]any{argocd.AnnotationSkipReconcile: "true", argocd.AnnotationManagedCluster: cluster,
				argocd.AnnotationAppNamespace: "argocd"},
			"finalizers": []any{argocd.ResourcesFinalizer},
			"ownerReferences": []any{map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": set,
				"uid": fmt.Sprintf("11111111-0000-0000-0000-%012d", i%50), "controller": &yes, "blockOwnerDeletion": &yes}},
			"managedFields": []any{map[string]any{"manager": "argocd-pull", "operation": "Update", "subresource": "status", "time": at,
				"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:status": map[string]any{".": map[string]any{}, "f:sync": map[string]any{}}}}},
		},
		"spec": map[string]any{"project": "default", "source": source,
			"destination": map[string]any{"server": "https://" + cluster + ".ocm-pull.invalid", "namespace": set},
			"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}, "syncOptions": []any{"CreateNamespace=true"}}},
		"status": map[string]any{
			"sync":         map[string]any{"status": "Synced", "revision": revision, "comparedTo": map[string]any{"source": source}},
			"health":       map[string]any{"status": "Healthy", "lastTransitionTime": at},
			"resources":    resources,
			"reconciledAt": at, "sourceType": "Directory",
			"operationState": map[string]any{"phase": "Succeeded", "message": "successfully synced (all tasks run)", "startedAt": at,
				"finishedAt": at, "syncResult": map[string]any{"revision": revision, "source": source, "resources": resources}},
			"history": []any{map[string]any{"id": 0, "revision": revision, "deployedAt": at, "source": source}},
		},
	}
	b, err := json.Marshal(app)
	if err != nil {
		panic(err)
	}
	return b
}

// cached decodes an Application and keeps it as the controller's cache does (application.CacheOptions).
func cached(t testing.TB, data []byte) *argocd.Application {
	app := &argocd.Application{}
	if err := json.Unmarshal(data, app); err != nil {
		t.Fatal(err)
	}
	app.ManagedFields = nil
	argocd.InternMetadata(&app.ObjectMeta)
	if err := app.Compact(); err != nil {
		t.Fatal(err)
	}
	return app
}

// TestInternMetadataShares: equal label and annotation maps, finalizer lists and owner references are shared
// between objects; different ones, and maps with long values, are not.
func TestInternMetadataShares(t *testing.T) {
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	meta := func(cluster, set, note string) *metav1.ObjectMeta {
		yes := true
		m := &metav1.ObjectMeta{Labels: map[string]string{argocd.LabelPull: "true"},
			Annotations: map[string]string{argocd.AnnotationManagedCluster: cluster},
			Finalizers:  []string{argocd.ResourcesFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: set,
				UID: kubetypes.UID("uid-" + set), Controller: &yes}}}
		if note != "" {
			m.Annotations["note"] = note
		}
		argocd.InternMetadata(m)
		return m
	}
	a, b, c := meta("c1", "s1", ""), meta("c1", "s1", ""), meta("c2", "s2", "")
	if !same(a.Labels, b.Labels) || !same(a.Annotations, b.Annotations) || !same(a.Finalizers, b.Finalizers) ||
		!same(a.OwnerReferences, b.OwnerReferences) {
		t.Error("equal metadata is not shared")
	}
	if same(a.Annotations, c.Annotations) || same(a.OwnerReferences, c.OwnerReferences) || c.Annotations[argocd.AnnotationManagedCluster] != "c2" {
		t.Error("different metadata is shared")
	}
	if !same(a.Labels, c.Labels) {
		t.Error("equal labels of different objects are not shared")
	}
	long := string(make([]byte, 100))
	if d, e := meta("c1", "s1", long), meta("c1", "s1", long); same(d.Annotations, e.Annotations) {
		t.Error("maps with long values are shared")
	}
	own := &metav1.ObjectMeta{Annotations: map[string]string{argocd.AnnotationManagedCluster: "c1"}}
	argocd.InternMetadataOwnAnnotations(own)
	if same(own.Annotations, a.Annotations) {
		t.Error("InternMetadataOwnAnnotations shares annotations")
	}
}

// TestInternMetadataWritesNothingItIsGiven: interning never writes into the maps and slices of the metadata it
// is given. An informer transforms the objects of a list twice (pagedlist), and the second time their labels are
// the map shared with the objects already in the cache, which other goroutines read: a write there, even of an
// equal string, killed the controller at 15,000 Applications ("concurrent map read and map write").
func TestInternMetadataWritesNothingItIsGiven(t *testing.T) {
	yes := true
	fresh := func() *metav1.ObjectMeta {
		// Strings equal to interned ones but not the same bytes, as a decoder makes them.
		c := strings.Clone
		return &metav1.ObjectMeta{Namespace: c("argocd"),
			Labels:      map[string]string{c(argocd.LabelPull): c("true")},
			Annotations: map[string]string{c(argocd.AnnotationManagedCluster): c("cluster1")},
			Finalizers:  []string{c(argocd.ResourcesFinalizer)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("argoproj.io/v1alpha1"), Kind: c("ApplicationSet"),
				Name: c("set-01"), UID: "uid-set-01", Controller: &yes}}}
	}
	argocd.InternMetadata(fresh())
	given := fresh()
	labels, annotations := maps.Clone(given.Labels), maps.Clone(given.Annotations)
	finalizers, owners := slices.Clone(given.Finalizers), slices.Clone(given.OwnerReferences)
	kept := *given
	argocd.InternMetadata(&kept)
	sameBytes := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	for k, v := range given.Labels {
		if !sameBytes(v, labels[k]) {
			t.Errorf("label %s was rewritten in the map given", k)
		}
	}
	for k, v := range given.Annotations {
		if !sameBytes(v, annotations[k]) {
			t.Errorf("annotation %s was rewritten in the map given", k)
		}
	}
	if !sameBytes(given.Finalizers[0], finalizers[0]) {
		t.Error("a finalizer was rewritten in the slice given")
	}
	if o := given.OwnerReferences[0]; !sameBytes(o.Name, owners[0].Name) || !sameBytes(o.Kind, owners[0].Kind) {
		t.Error("an owner reference was rewritten in the slice given")
	}
	if !maps.Equal(kept.Labels, labels) || !maps.Equal(kept.Annotations, annotations) ||
		!slices.Equal(kept.Finalizers, finalizers) || kept.OwnerReferences[0].Name != "set-01" {
		t.Errorf("interned metadata differs from what it was given: %+v", kept)
	}

	// The informer's second transform, while the cache's readers read the maps the first one shared.
	first := fresh()
	argocd.InternMetadata(first)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			_ = argocd.IsPullApplication(first)
			_ = first.Annotations[argocd.AnnotationManagedCluster]
		}
	}()
	for range 1000 {
		again := *first
		argocd.InternMetadata(&again)
	}
	<-done
}

// TestApplicationCacheMemory measures the heap an Application takes in the controller's cache, for the fleet
// of hubApplication: 15,000 Applications of 300 clusters.
func TestApplicationCacheMemory(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("memory figures of a -race build mean nothing")
	}
	const n = 15000
	data := make([][]byte, n)
	for i := range data {
		data[i] = hubApplication(i)
	}
	apps := make([]*argocd.Application, n)
	perApp := testutil.HeapPerItem(n, func() {
		for i := range apps {
			apps[i] = cached(t, data[i])
		}
	})
	t.Logf("%.0f bytes per cached Application", perApp)
	if perApp > 1500 {
		t.Errorf("a cached Application takes %.0f bytes, want at most 1500", perApp)
	}
	if a := apps[n-1]; a.Annotations[argocd.AnnotationManagedCluster] != "cluster299" || a.Summary.Sync != "Synced" || a.Summary.ResourceCount != 4 {
		t.Fatalf("the cache lost what it keeps: %+v", a)
	}
	runtime.KeepAlive(apps)
	runtime.KeepAlive(data)
}

// TestCompactTwice: Compact leaves an Application it compacted already as it is (informers transform the objects
// of a paged list twice), and still compacts an Application whose raw status came back after it was compacted.
func TestCompactTwice(t *testing.T) {
	app := cached(t, hubApplication(7))
	want := *app.Summary
	if want.Sync != "Synced" || want.Health != "Healthy" || want.ResourceCount != 4 {
		t.Fatalf("first Compact: %+v", want)
	}
	if err := app.Compact(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*app.Summary, want) {
		t.Errorf("second Compact changed the summary: %+v, was %+v", *app.Summary, want)
	}
	// A status written over the compacted object (the apiserver's answer to a status patch) is compacted again.
	app.Status = json.RawMessage(`{"sync":{"status":"OutOfSync"},"health":{"status":"Progressing"}}`)
	if err := app.Compact(); err != nil {
		t.Fatal(err)
	}
	if app.Summary.Sync != "OutOfSync" || app.Summary.Health != "Progressing" || app.Status != nil {
		t.Errorf("Compact of a new raw status: %+v, raw %s", *app.Summary, app.Status)
	}
}
