package hubmanager

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"
)

// countingMapper counts the RESTMapping calls that reach it.
type countingMapper struct {
	meta.RESTMapper
	calls int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

var applicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// TestFoundMappings: a mapping found once is answered without asking the dynamic mapper again, per kind and
// versions; a kind not found is asked again and found once its CRD is installed.
func TestFoundMappings(t *testing.T) {
	known := meta.NewDefaultRESTMapper(nil)
	known.Add(applicationGVK, meta.RESTScopeNamespace)
	counting := &countingMapper{RESTMapper: known}
	m := &foundMappings{RESTMapper: counting, found: map[mappingKey]*meta.RESTMapping{}}

	first, err := m.RESTMapping(applicationGVK.GroupKind(), applicationGVK.Version)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.RESTMapping(applicationGVK.GroupKind(), applicationGVK.Version)
	if err != nil || again != first || counting.calls != 1 {
		t.Fatalf("second mapping %v (err %v), dynamic mapper asked %d times; want the first one, asked once", again, err, counting.calls)
	}
	if first.Resource.Resource != "applications" || first.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Errorf("mapping = %+v", first)
	}
	if _, err := m.RESTMapping(applicationGVK.GroupKind(), "v1", applicationGVK.Version); err != nil || counting.calls != 2 {
		t.Errorf("other versions: err %v, dynamic mapper asked %d times, want 2 (another key)", err, counting.calls)
	}

	appSet := schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationSet"}
	if _, err := m.RESTMapping(appSet.GroupKind(), appSet.Version); !meta.IsNoMatchError(err) {
		t.Fatalf("unknown kind: err = %v, want a no-match error", err)
	}
	known.Add(appSet, meta.RESTScopeNamespace)
	if mapping, err := m.RESTMapping(appSet.GroupKind(), appSet.Version); err != nil || mapping.Resource.Resource != "applicationsets" {
		t.Errorf("after its CRD was installed: %v, %v", mapping, err)
	}
}

// BenchmarkRESTMapping is the mapping the metadata client makes at every request (the Application status PATCH)
// through the dynamic mapper's PriorityRESTMapper over the hub's API groups, and remembered.
func BenchmarkRESTMapping(b *testing.B) {
	var groups []*restmapper.APIGroupResources
	for i := range 30 {
		name := fmt.Sprintf("group%d.example.com", i)
		if i == 29 {
			name = applicationGVK.Group
		}
		gv := metav1.GroupVersionForDiscovery{GroupVersion: name + "/v1alpha1", Version: "v1alpha1"}
		groups = append(groups, &restmapper.APIGroupResources{
			Group: metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv},
			VersionedResources: map[string][]metav1.APIResource{"v1alpha1": {
				{Name: "applications", Kind: "Application", Namespaced: true},
				{Name: "applicationsets", Kind: "ApplicationSet", Namespaced: true},
			}},
		})
	}
	dynamic := restmapper.NewDiscoveryRESTMapper(groups)
	for _, c := range []struct {
		name   string
		mapper meta.RESTMapper
	}{
		{"dynamic", dynamic},
		{"remembered", &foundMappings{RESTMapper: dynamic, found: map[mappingKey]*meta.RESTMapping{}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.mapper.RESTMapping(applicationGVK.GroupKind(), applicationGVK.Version); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
