package statuscmd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/<name>.golden, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test -update to accept it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// fixture is a small fleet: two ApplicationSets in two namespaces and a standalone Application.
func fixture() []appsetreport.Observed {
	synced := func(ns, name, appSet, cluster string) appsetreport.Observed {
		return appsetreport.Observed{Namespace: ns, Name: name, AppSet: appSet, Cluster: cluster,
			Sync: "Synced", Health: "Healthy", Revision: "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",
			OperationPhase: "Succeeded", OperationStartedAt: "2025-06-01T10:00:00Z"}
	}
	degraded := synced("apps", "guestbook-cluster-2", "guestbook", "cluster-2")
	degraded.Sync, degraded.Health = "OutOfSync", "Degraded"
	degraded.OperationPhase, degraded.OperationMessage = "Failed", "one or more objects failed to apply, reason: Deployment.apps \"guestbook-ui\" is invalid:\nspec.template.spec.containers[0].image: Required value"
	degraded.Conditions = []v1alpha1.AppCondition{{Type: "SyncError", Message: "Failed sync attempt to 9f8e7d6c: one or more objects failed to apply, " +
		"reason: Deployment.apps \"guestbook-ui\" is invalid: spec.template.spec.containers[0].image: Required value (retried 5 times)."}}

	progressing := synced("apps", "guestbook-cluster-3", "guestbook", "cluster-3")
	progressing.Health, progressing.HealthMessage = "Progressing", "Waiting for rollout to finish: 1 of 3 updated replicas are available..."
	progressing.OperationPhase = "Running"

	undelivered := appsetreport.Observed{Namespace: "apps", Name: "guestbook-cluster-9", AppSet: "guestbook", Cluster: "cluster-9",
		Conditions: []v1alpha1.AppCondition{{Type: "UnknownClusterError", Message: "managed cluster cluster-9 does not exist"}}}

	return []appsetreport.Observed{
		synced("apps", "guestbook-cluster-1", "guestbook", "cluster-1"),
		degraded,
		progressing,
		undelivered,
		synced("team-b", "billing-cluster-1", "billing", "cluster-1"),
		synced("team-b", "billing-cluster-2", "billing", "cluster-2"),
		synced("team-b", "standalone", "", "cluster-1"),
	}
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name          string
		output        string
		allNamespaces bool
		filter        func(appsetreport.Observed) bool
	}{
		{name: "table", allNamespaces: true},
		{name: "table-namespace", filter: func(o appsetreport.Observed) bool { return o.Namespace == "apps" }},
		{name: "wide", output: OutputWide, allNamespaces: true},
		{name: "json", output: OutputJSON, allNamespaces: true},
		{name: "yaml", output: OutputYAML, allNamespaces: true},
		{name: "empty-json", output: OutputJSON, allNamespaces: true, filter: func(appsetreport.Observed) bool { return false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var apps []appsetreport.Observed
			for _, o := range fixture() {
				if tt.filter == nil || tt.filter(o) {
					apps = append(apps, o)
				}
			}
			var out bytes.Buffer
			p := &printer{w: &out, output: tt.output, allNamespaces: tt.allNamespaces}
			if err := p.printView(NewView(apps)); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, out.Bytes())
		})
	}
}

func TestRenderWatchGolden(t *testing.T) {
	for _, output := range []string{OutputTable, OutputWide, OutputJSON, OutputYAML} {
		name := "watch-" + output
		if output == OutputTable {
			name = "watch-table"
		}
		t.Run(name, func(t *testing.T) {
			apps := fixture()[:2]
			var out bytes.Buffer
			p := &printer{w: &out, output: output, allNamespaces: true, events: true}
			if output == OutputTable || output == OutputWide {
				if err := p.printView(NewView(apps)); err != nil {
					t.Fatal(err)
				}
			}
			changed := apps[1]
			changed.Sync, changed.Health, changed.Conditions, changed.OperationPhase = "Synced", "Healthy", nil, "Succeeded"
			added := fixture()[3]
			for _, ev := range []struct {
				typ string
				o   appsetreport.Observed
			}{{"MODIFIED", changed}, {"ADDED", added}, {"DELETED", apps[0]}} {
				if err := p.printEvent(ev.typ, NewApplication(ev.o)); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, name, out.Bytes())
		})
	}
}
