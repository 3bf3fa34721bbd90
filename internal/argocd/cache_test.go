package argocd

import "testing"

func TestCacheKeys(t *testing.T) {
	tests := []struct {
		key  string
		want CacheKey
		ok   bool
	}{
		{"app|resources-tree|guestbook|1.8.3.gz", CacheKey{Entry: CacheEntryTree, Instance: "guestbook", Gzip: true}, true},
		{"app|resources-tree|team_guestbook|2|1.8.3.gz", CacheKey{Entry: CacheEntryTree, Instance: "team_guestbook", Shard: 2, Gzip: true}, true},
		{"app|managed-resources|team_guestbook|1.8.3", CacheKey{Entry: CacheEntryManagedResources, Instance: "team_guestbook"}, true},
		{"cluster|info|https://c1.ocm-pull.invalid|1.8.3.gz", CacheKey{Entry: CacheEntryClusterInfo, Server: "https://c1.ocm-pull.invalid", Gzip: true}, true},
		{"app|resources-tree|guestbook|1.8.2.gz", CacheKey{}, false},
		{"app|managed-resources|guestbook|1|1.8.3.gz", CacheKey{}, false},
		{"app|resources-tree|guestbook|0|1.8.3.gz", CacheKey{}, false},
		{"app|manifests|x|1.8.3.gz", CacheKey{}, false},
		{"mfst|x|1.8.3.gz", CacheKey{}, false},
		{"app|resources-tree||1.8.3", CacheKey{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseCacheKey(tt.key)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseCacheKey(%q) = %+v, %v; want %+v, %v", tt.key, got, ok, tt.want, tt.ok)
		}
		if ok && got.String() != tt.key {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), tt.key)
		}
	}
}

func TestInstanceNames(t *testing.T) {
	if got := InstanceName("argocd", "app", "argocd"); got != "app" {
		t.Errorf("InstanceName in the control namespace = %q", got)
	}
	if got := InstanceName("team", "app", "argocd"); got != "team_app" {
		t.Errorf("InstanceName elsewhere = %q", got)
	}
	if ns, n := SplitInstanceName("team_app", "argocd"); ns != "team" || n != "app" {
		t.Errorf("SplitInstanceName = %q %q", ns, n)
	}
	if ns, n := SplitInstanceName("app", "argocd"); ns != "argocd" || n != "app" {
		t.Errorf("SplitInstanceName of a bare name = %q %q", ns, n)
	}
	ch := TreeChangedChannel("team_app")
	if ch != "app|managed-resources|team_app|1.8.3" {
		t.Errorf("TreeChangedChannel = %q", ch)
	}
	if got, ok := ParseTreeChangedChannel(ch); !ok || got != "team_app" {
		t.Errorf("ParseTreeChangedChannel = %q %v", got, ok)
	}
	if _, ok := ParseTreeChangedChannel("app|managed-resources|x|1.8.3.gz"); ok {
		t.Error("a key is not a channel")
	}
}

func TestClusterServers(t *testing.T) {
	if got := ClusterServerURL("c1"); got != "https://c1.ocm-pull.invalid" {
		t.Errorf("ClusterServerURL = %q", got)
	}
	for in, want := range map[string]string{"https://c1.ocm-pull.invalid": "c1", "https://a.b.ocm-pull.invalid": "a.b"} {
		if got, ok := ClusterOfServerURL(in); !ok || got != want {
			t.Errorf("ClusterOfServerURL(%q) = %q %v", in, got, ok)
		}
	}
	for _, in := range []string{"https://kubernetes.default.svc", "http://c1.ocm-pull.invalid", "https://ocm-pull.invalid", "https://c1.ocm-pull.invalid/x"} {
		if got, ok := ClusterOfServerURL(in); ok {
			t.Errorf("ClusterOfServerURL(%q) = %q", in, got)
		}
	}
	if got, ok := ClusterOfServerHost("c1.ocm-pull.invalid:443"); !ok || got != "c1" {
		t.Errorf("ClusterOfServerHost with a port = %q %v", got, ok)
	}
}
