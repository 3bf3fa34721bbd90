package workclient

import (
	"fmt"
	"maps"
	"testing"

	"k8s.io/klog/v2"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestKeptAnnotations: a kept work's annotations read back as they were, the sequence ID apart, whether their
// keys are numbered or, once the numbers run out, kept as they are; each read is a map of its own.
func TestKeptAnnotations(t *testing.T) {
	saved := annotationKeys
	annotationKeys = &keyNumbers{numbers: map[string]int{}}
	t.Cleanup(func() { annotationKeys = saved })

	const seqKey = common.CloudEventsSequenceIDAnnotationKey
	work := map[string]string{
		argocd.AnnotationHubAppNamespace: "team-a",
		argocd.AnnotationHubAppName:      "guestbook-cluster1",
		argocd.AnnotationHostingAppSet:   "team-a/guestbook",
		"argocd-pull.io/spec-hash":       "3f1c",
		"empty":                          "",
		seqKey:                           "1854718813467537400",
	}
	many := map[string]string{}
	for i := range maxAnnotationKeys + 10 {
		many[fmt.Sprintf("example.com/key-%03d", i)] = fmt.Sprintf("value %d", i)
	}
	// In this order: the work's keys are numbered before the numbers run out.
	for _, c := range []struct {
		name        string
		annotations map[string]string
	}{{"work", work}, {"more keys than numbers", many}, {"none", nil}, {"sequence ID alone", map[string]string{seqKey: "1"}}} {
		name, annotations := c.name, c.annotations
		kept := encodeAnnotations(annotations, seqKey)
		want := maps.Clone(annotations)
		delete(want, seqKey)
		if len(want) == 0 {
			want = nil
		}
		if got := kept.asMap(seqKey, ""); !maps.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s: read back as %v, want %v", name, got, want)
		}
		withSeq := kept.asMap(seqKey, "42")
		if withSeq[seqKey] != "42" || len(withSeq) != len(want)+1 {
			t.Errorf("%s: with the sequence ID, read back as %v", name, withSeq)
		}
		for k, v := range want {
			if got, ok := kept.get(k); !ok || got != v {
				t.Errorf("%s: get(%q) = %q, %v; want %q", name, k, got, ok, v)
			}
		}
		if _, ok := kept.get("absent"); ok {
			t.Errorf("%s: an absent annotation was found", name)
		}
		// Each read is a map of its own: the caller may modify it.
		if m := kept.asMap(seqKey, "1"); m != nil {
			m["added"] = "x"
			if _, ok := kept.asMap(seqKey, "1")["added"]; ok {
				t.Errorf("%s: two reads share a map", name)
			}
		}
	}
	if n := len(annotationKeys.list()); n != maxAnnotationKeys {
		t.Errorf("%d keys numbered, want the first %d met", n, maxAnnotationKeys)
	}
	// The same annotations encode the same, and take less than their keys once these are numbered.
	if a, b := encodeAnnotations(work, seqKey), encodeAnnotations(maps.Clone(work), seqKey); a != b {
		t.Errorf("the same annotations encode as %q and %q", a, b)
	} else if len(a) >= len("team-aguestbook-cluster1team-a/guestbook3f1c")+len(argocd.AnnotationHubAppNamespace) {
		t.Errorf("numbered keys take %d bytes", len(a))
	}
}

// TestStoredWorkSequenceID: the sequence ID of a work's last status is its metadata's annotation, with its other
// annotations, while the statuses of the work share the encoding of those.
func TestStoredWorkSequenceID(t *testing.T) {
	s := newWorkStore()
	if err := s.Add(publishedWork(3)); err != nil {
		t.Fatal(err)
	}
	key := storeKey(publishedWork(3).Namespace, publishedWork(3).Name)
	first := s.byKey[key]
	status := reportedWork(3)
	status.UID = first.meta.UID
	status.Annotations = map[string]string{common.CloudEventsSequenceIDAnnotationKey: sequenceID(3, 1)}
	if _, stored, _, err := s.applyStatus(klog.Background(), first, status); err != nil || stored == nil {
		t.Fatalf("the first status was not stored: %v", err)
	}
	updated := s.byKey[key]
	meta := updated.metadata()
	want := maps.Clone(publishedWork(3).Annotations)
	want[common.CloudEventsSequenceIDAnnotationKey] = sequenceID(3, 1)
	if !maps.Equal(meta.Annotations, want) {
		t.Errorf("annotations after a status = %v, want %v", meta.Annotations, want)
	}
	if updated.annotations != first.annotations || updated.applicationKey() != ApplicationKey(meta) || updated.applicationKey() == "" {
		t.Errorf("the status's work does not share the annotations, or names another Application (%q, %q)", updated.applicationKey(), ApplicationKey(meta))
	}
}
