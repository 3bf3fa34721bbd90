package application

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func resource(group, version, kind, namespace, name string) map[string]any {
	return map[string]any{
		"group": group, "version": version, "kind": kind, "namespace": namespace, "name": name,
		"status": "Synced", "health": map[string]any{"status": "Healthy", "message": "ok"}, "syncWave": int64(1),
	}
}

func TestCompactStatus(t *testing.T) {
	many := make([]any, MaxCachedResources+5)
	for i := range many {
		many[i] = resource("", "v1", "ConfigMap", "ns", fmt.Sprintf("cm-%03d", i))
	}
	var manyRefs string
	for i := range MaxCachedResources {
		if i > 0 {
			manyRefs += "\n"
		}
		manyRefs += fmt.Sprintf("/v1/ConfigMap/ns/cm-%03d", i)
	}

	tests := []struct {
		name   string
		status map[string]any
		want   map[string]any
	}{
		{name: "empty", status: map[string]any{}, want: map[string]any{}},
		{
			name: "keeps sync, health, operation and conditions, drops the rest",
			status: map[string]any{
				"sync":           map[string]any{"status": "Synced", "revision": "abc", "comparedTo": map[string]any{"source": "x"}},
				"health":         map[string]any{"status": "Degraded", "message": "crash"},
				"operationState": map[string]any{"phase": "Failed", "startedAt": "t0", "finishedAt": "t1", "message": "boom", "syncResult": map[string]any{}},
				"conditions":     []any{map[string]any{"type": "SyncError", "message": "m"}},
				"history":        []any{map[string]any{"id": int64(1)}},
				"summary":        map[string]any{"images": []any{"nginx"}},
			},
			want: map[string]any{
				"sync":           map[string]any{"status": "Synced", "revision": "abc"},
				"health":         map[string]any{"status": "Degraded", "message": "crash"},
				"operationState": map[string]any{"phase": "Failed", "startedAt": "t0", "finishedAt": "t1", "message": "boom"},
				"conditions":     []any{map[string]any{"type": "SyncError", "message": "m"}},
			},
		},
		{
			name: "resources keep only their identity",
			status: map[string]any{"resources": []any{
				resource("apps", "v1", "Deployment", "guestbook", "ui"),
				resource("", "v1", "Namespace", "", "guestbook"),
			}},
			want: map[string]any{"resourceRefs": "apps/v1/Deployment/guestbook/ui\n/v1/Namespace//guestbook"},
		},
		{
			name: "malformed resources are skipped",
			status: map[string]any{"resources": []any{
				"not a map",
				map[string]any{"kind": "ConfigMap"},
				resource("", "v1", "ConfigMap", "ns", "a"),
			}},
			want: map[string]any{"resourceRefs": "/v1/ConfigMap/ns/a"},
		},
		{name: "no resources", status: map[string]any{"resources": []any{}}, want: map[string]any{}},
		{
			name:   "long lists are cut and counted",
			status: map[string]any{"resources": many},
			want:   map[string]any{"resourceRefs": manyRefs, "resourceCount": int64(MaxCachedResources + 5)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CompactStatus(tt.status)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CompactStatus() =\n%#v\nwant\n%#v", got, tt.want)
			}
			// The compact status is stored in unstructured objects: it must deep-copy.
			_ = (&unstructured.Unstructured{Object: map[string]any{"status": got}}).DeepCopy()
		})
	}
}

func TestCachedResources(t *testing.T) {
	many := make([]any, MaxCachedResources+1)
	for i := range many {
		many[i] = resource("", "v1", "ConfigMap", "ns", fmt.Sprintf("cm-%d", i))
	}
	tests := []struct {
		name      string
		resources []any
		wantLen   int
		wantCount int
		wantFirst ResourceRef
	}{
		{name: "none", resources: nil},
		{name: "one", resources: []any{resource("apps", "v1", "Deployment", "ns", "ui")}, wantLen: 1, wantCount: 1,
			wantFirst: ResourceRef{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "ui"}},
		{name: "cut", resources: many, wantLen: MaxCachedResources, wantCount: MaxCachedResources + 1,
			wantFirst: ResourceRef{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := map[string]any{}
			if tt.resources != nil {
				status["resources"] = tt.resources
			}
			app := &unstructured.Unstructured{Object: map[string]any{"status": CompactStatus(status)}}
			refs, count := CachedResources(app)
			if len(refs) != tt.wantLen || count != tt.wantCount {
				t.Fatalf("CachedResources() = %d refs, count %d; want %d, %d", len(refs), count, tt.wantLen, tt.wantCount)
			}
			if tt.wantLen > 0 && refs[0] != tt.wantFirst {
				t.Errorf("first ref = %+v, want %+v", refs[0], tt.wantFirst)
			}
		})
	}
}

func TestCompactStatusSharesResourceStrings(t *testing.T) {
	status := func() map[string]any {
		return map[string]any{"resources": []any{resource("apps", "v1", "Deployment", "guestbook", "ui")}}
	}
	a := CompactStatus(status())["resourceRefs"].(string)
	b := CompactStatus(status())["resourceRefs"].(string)
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("two Applications that deploy the same resources do not share the cached string")
	}
}

func TestInternTableIsBounded(t *testing.T) {
	table := &internTable{maxEntries: 3, maxBytes: 1 << 10}
	for i := range 10 {
		table.intern(fmt.Sprintf("s%d", i))
		if len(table.m) > 3 {
			t.Fatalf("table holds %d strings, limit 3", len(table.m))
		}
	}
	table = &internTable{maxEntries: 100, maxBytes: 10}
	for i := range 10 {
		table.intern(fmt.Sprintf("string-%d", i))
		if table.bytes > 10 {
			t.Fatalf("table holds %d bytes, limit 10", table.bytes)
		}
	}
}

// BenchmarkCompactStatusMemory reports the heap an Application's cached status costs, without resources and
// with the 20 resources that every Application of an ApplicationSet deploys (their identities are shared).
func BenchmarkCompactStatusMemory(b *testing.B) {
	resources := make([]any, 20)
	for i := range resources {
		resources[i] = resource("apps", "v1", "Deployment", "guestbook", fmt.Sprintf("web-%02d", i))
	}
	for _, n := range []int{0, 20} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			status := func() map[string]any {
				s := map[string]any{
					"sync":   map[string]any{"status": "Synced", "revision": "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"},
					"health": map[string]any{"status": "Healthy"},
				}
				if n > 0 {
					s["resources"] = resources[:n]
				}
				return s
			}
			const apps = 10000
			var before, after runtime.MemStats
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				kept := make([]map[string]any, apps)
				for i := range kept {
					kept[i] = CompactStatus(status())
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/apps, "heap-bytes/app")
		})
	}
}
