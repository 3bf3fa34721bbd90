package argocd

import (
	"slices"
	"testing"
)

func TestResourceRefsRoundTrip(t *testing.T) {
	refs := []ResourceRef{
		{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "cm"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "reader"},
		{Kind: "Pod"}, // no name: not encoded
	}
	s, count := EncodeResourceRefs(refs)
	if count != 3 {
		t.Fatalf("count = %d, want 3", count)
	}
	want := "/v1/ConfigMap/default/cm\napps/v1/Deployment/guestbook/web\nrbac.authorization.k8s.io/v1/ClusterRole//reader"
	if s != want {
		t.Fatalf("encoded %q, want %q", s, want)
	}
	if got := ParseResourceRefs(s); !slices.Equal(got, refs[:3]) {
		t.Fatalf("parsed %+v, want %+v", got, refs[:3])
	}
}

func TestParseResourceRef(t *testing.T) {
	for line, want := range map[string]*ResourceRef{
		"apps/v1/Deployment/ns/web":   {Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web"},
		"////":                        {},
		"a/b/c/d/e/f":                 {Group: "a", Version: "b", Kind: "c", Namespace: "d", Name: "e/f"},
		"apps/v1/Deployment/web":      nil,
		"":                            nil,
		"not a resource, a sentence.": nil,
	} {
		got, ok := ParseResourceRef(line)
		if ok != (want != nil) || (ok && got != *want) {
			t.Errorf("ParseResourceRef(%q) = %+v, %v; want %+v", line, got, ok, want)
		}
	}
	// The reports parse every line of every Application's resources at each evaluation.
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseResourceRef("apps/v1/Deployment/ns/web") }); n != 0 {
		t.Errorf("ParseResourceRef allocated %v times, want 0", n)
	}
}
