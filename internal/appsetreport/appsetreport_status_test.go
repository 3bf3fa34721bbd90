package appsetreport

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// app is a cached hub Application: owned by ApplicationSet "guestbook", delivered to cluster, with the status
// summarised as the controller's cache keeps it.
func app(name, cluster string, status map[string]any) *argocd.Application {
	a := &argocd.Application{}
	a.SetNamespace("apps")
	a.SetName(name)
	a.SetLabels(map[string]string{argocd.LabelPull: "true"})
	a.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: cluster})
	a.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "guestbook", UID: "u1"}})
	if status != nil {
		a.Status, _ = json.Marshal(status)
	}
	if err := a.Compact(); err != nil {
		panic(err)
	}
	return a
}

func status(sync, health string, extra ...func(map[string]any)) map[string]any {
	s := map[string]any{
		"sync":   map[string]any{"status": sync, "revision": "r1"},
		"health": map[string]any{"status": health},
	}
	for _, e := range extra {
		e(s)
	}
	return s
}

func withConditions(conds ...string) func(map[string]any) {
	return func(s map[string]any) {
		var list []any
		for i := 0; i+1 < len(conds); i += 2 {
			list = append(list, map[string]any{"type": conds[i], "message": conds[i+1], "lastTransitionTime": "2025-01-01T00:00:00Z"})
		}
		s["conditions"] = list
	}
}

func withOperation(phase, message string) func(map[string]any) {
	return func(s map[string]any) {
		s["operationState"] = map[string]any{"phase": phase, "message": message, "startedAt": "2025-01-01T00:00:00Z"}
	}
}

func withHealthMessage(m string) func(map[string]any) {
	return func(s map[string]any) { s["health"].(map[string]any)["message"] = m }
}

func withResources(names ...string) func(map[string]any) {
	return func(s map[string]any) {
		var list []any
		for _, n := range names {
			kind, name, _ := strings.Cut(n, "/")
			list = append(list, map[string]any{"version": "v1", "kind": kind, "namespace": "guestbook", "name": name, "status": "Synced"})
		}
		s["resources"] = list
	}
}

func observeAll(apps ...*argocd.Application) []Observed {
	out := make([]Observed, len(apps))
	for i, a := range apps {
		out[i] = Observe(a)
	}
	return out
}

func TestObserve(t *testing.T) {
	got := Observe(app("guestbook-c1", "c1", status("OutOfSync", "Degraded",
		withConditions("SyncError", "sync failed", "SharedResourceWarning", "shared"),
		withOperation("Failed", "one or more objects failed"),
		withHealthMessage("crash loop"),
		withResources("ConfigMap/a", "Service/b"))))
	want := Observed{
		Namespace: "apps", Name: "guestbook-c1", AppSet: "guestbook", Cluster: "c1",
		Sync: "OutOfSync", Revision: "r1", Health: "Degraded", HealthMessage: "crash loop",
		OperationPhase: "Failed", OperationStartedAt: "2025-01-01T00:00:00Z", OperationMessage: "one or more objects failed",
		Conditions:   []v1alpha1.AppCondition{{Type: "SyncError", Message: "sync failed"}, {Type: "SharedResourceWarning", Message: "shared"}},
		ResourceRefs: "/v1/ConfigMap/guestbook/a\n/v1/Service/guestbook/b",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Observe() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestSeverityAndMessage(t *testing.T) {
	tests := []struct {
		name     string
		status   map[string]any
		severity int
		message  string
	}{
		{name: "synced healthy", status: status("Synced", "Healthy"), severity: severityFine},
		{name: "no status yet", status: nil, severity: severityWarning},
		{name: "out of sync", status: status("OutOfSync", "Healthy"), severity: severityWarning},
		{name: "progressing", status: status("Synced", "Progressing", withHealthMessage("waiting for rollout")),
			severity: severityProgressing, message: "waiting for rollout"},
		{name: "sync running", status: status("Synced", "Healthy", withOperation("Running", "")), severity: severityProgressing},
		{name: "degraded", status: status("Synced", "Degraded", withHealthMessage("crash loop")), severity: severityError, message: "crash loop"},
		{name: "missing", status: status("OutOfSync", "Missing"), severity: severityError},
		{name: "failed sync", status: status("OutOfSync", "Healthy", withOperation("Failed", "hook failed")),
			severity: severityError, message: "hook failed"},
		{name: "healthy with a warning", status: status("Synced", "Healthy", withConditions("DeliveryWarning", "feedback too large")),
			severity: severityWarning, message: "feedback too large"},
		{name: "error condition before health message",
			status:   status("Unknown", "Unknown", withConditions("OrphanedResourceWarning", "w", "UnknownClusterError", "cluster c1 not found"), withHealthMessage("h")),
			severity: severityError, message: "cluster c1 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Observe(app("a", "c1", tt.status))
			if got := o.severity(); got != tt.severity {
				t.Errorf("severity() = %d, want %d", got, tt.severity)
			}
			if got := o.Message(); got != tt.message {
				t.Errorf("Message() = %q, want %q", got, tt.message)
			}
			if got := o.NeedsAttention(); got != (tt.severity != severityFine) {
				t.Errorf("NeedsAttention() = %v", got)
			}
		})
	}
}

func TestCount(t *testing.T) {
	apps := observeAll(
		app("a1", "c1", status("Synced", "Healthy")),
		app("a2", "c2", status("OutOfSync", "Healthy")),
		app("a3", "c3", status("Synced", "Progressing")),
		app("a4", "c4", status("Synced", "Degraded")),
		app("a5", "c5", nil),
		app("a6", "c1", status("Synced", "Healthy")), // a second Application on c1
	)
	got := Count(apps).Summary()
	want := v1alpha1.ReportSummary{Clusters: "5", Applications: "6", Synced: "4", NotSynced: "2", Healthy: "3", NotHealthy: "3", InProgress: "1"}
	if got != want {
		t.Errorf("Summary() = %+v, want %+v", got, want)
	}
	one := Count(apps[:2]).Summary()
	if one.Applications != "" {
		t.Errorf("applications = %q, want it left out when it equals clusters", one.Applications)
	}
}

func TestStatuses(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxClusterConditions = 3
	long := strings.Repeat("é", 300)

	tests := []struct {
		name        string
		apps        []*argocd.Application
		limits      Limits
		wantEntries []string // cluster of each entry, in order
		wantOmitted int32
		check       func(t *testing.T, s v1alpha1.AppConditions)
	}{
		{
			name: "small ApplicationSets list every Application, as ACM does",
			apps: []*argocd.Application{
				app("gb-c2", "c2", status("Synced", "Healthy")),
				app("gb-c1", "c1", status("OutOfSync", "Healthy")),
			},
			wantEntries: []string{"c1", "c2"},
			check: func(t *testing.T, s v1alpha1.AppConditions) {
				e := s.ClusterConditions[1]
				want := v1alpha1.ClusterCondition{Cluster: "c2", SyncStatus: "Synced", HealthStatus: "Healthy", SyncRevision: "r1",
					App: "apps/gb-c2/c2/" + application.WorkName("apps", "gb-c2"), HubApplication: "gb-c2"}
				if !reflect.DeepEqual(e, want) {
					t.Errorf("entry = %+v, want %+v", e, want)
				}
			},
		},
		{
			name: "large ApplicationSets list only the Applications that need attention",
			apps: []*argocd.Application{
				app("gb-c1", "c1", status("Synced", "Healthy")),
				app("gb-c2", "c2", status("Synced", "Healthy")),
				app("gb-c3", "c3", status("Synced", "Healthy")),
				app("gb-c4", "c4", status("OutOfSync", "Healthy")),
			},
			wantEntries: []string{"c4"},
		},
		{
			name: "beyond the limit the most severe are kept and the rest counted",
			apps: []*argocd.Application{
				app("gb-c1", "c1", status("Synced", "Progressing")),
				app("gb-c2", "c2", status("OutOfSync", "Healthy")),
				app("gb-c3", "c3", status("Synced", "Degraded")),
				app("gb-c4", "c4", status("Synced", "Healthy", withConditions("UnknownClusterError", "no such cluster"))),
				app("gb-c5", "c5", status("OutOfSync", "Healthy")),
			},
			wantEntries: []string{"c2", "c3", "c4"},
			wantOmitted: 2,
		},
		{
			name: "messages and conditions are cut, errors first",
			apps: []*argocd.Application{app("gb-c1", "c1", status("OutOfSync", "Degraded",
				withConditions("W1", "w", "W2", "w", "W3", "w", "W4", "w", "W5", "w", "ComparisonError", long),
				withHealthMessage(strings.Repeat("ü", 300))))},
			wantEntries: []string{"c1"},
			check: func(t *testing.T, s v1alpha1.AppConditions) {
				e := s.ClusterConditions[0]
				if len(e.Conditions) != limits.MaxConditions || e.Conditions[0].Type != "ComparisonError" {
					t.Errorf("conditions = %+v, want %d with the error first", e.Conditions, limits.MaxConditions)
				}
				for _, m := range []string{e.Conditions[0].Message, e.Message} {
					if len(m) > limits.MaxMessageLength || !strings.HasSuffix(m, "...") {
						t.Errorf("message of %d bytes not cut to %d: %q", len(m), limits.MaxMessageLength, m)
					}
				}
			},
		},
		{
			name: "a message already in a condition is not repeated",
			apps: []*argocd.Application{app("gb-c1", "c1", status("OutOfSync", "Healthy",
				withOperation("Failed", "boom"), withConditions("SyncError", "boom")))},
			wantEntries: []string{"c1"},
			check: func(t *testing.T, s v1alpha1.AppConditions) {
				if m := s.ClusterConditions[0].Message; m != "" {
					t.Errorf("message = %q, want none", m)
				}
			},
		},
		{
			name: "resources are the union, deduplicated and sorted",
			apps: []*argocd.Application{
				app("gb-c1", "c1", status("Synced", "Healthy", withResources("Service/web", "ConfigMap/config"))),
				app("gb-c2", "c2", status("Synced", "Healthy", withResources("Service/web", "ConfigMap/config"))),
				app("gb-c3", "c3", status("Synced", "Healthy", withResources("ConfigMap/extra"))),
			},
			wantEntries: []string{"c1", "c2", "c3"},
			limits:      Limits{MaxClusterConditions: 10, MaxConditions: 5, MaxMessageLength: 256, MaxResources: 2, MaxBytes: 1 << 20},
			check: func(t *testing.T, s v1alpha1.AppConditions) {
				want := []v1alpha1.ResourceRef{
					{APIVersion: "v1", Kind: "ConfigMap", Name: "config", Namespace: "guestbook"},
					{APIVersion: "v1", Kind: "ConfigMap", Name: "extra", Namespace: "guestbook"},
				}
				if !reflect.DeepEqual(s.Resources, want) || s.OmittedResources != 1 {
					t.Errorf("resources = %+v (omitted %d), want %+v (omitted 1)", s.Resources, s.OmittedResources, want)
				}
			},
		},
		{
			name: "the byte budget leaves entries out",
			apps: []*argocd.Application{
				app("gb-c1", "c1", status("OutOfSync", "Healthy", withConditions("SharedResourceWarning", long))),
				app("gb-c2", "c2", status("OutOfSync", "Degraded", withConditions("SyncError", long))),
			},
			limits:      Limits{MaxClusterConditions: 10, MaxConditions: 5, MaxMessageLength: 1000, MaxResources: 10, MaxBytes: 1200},
			wantEntries: []string{"c2"},
			wantOmitted: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limits
			if tt.limits != (Limits{}) {
				l = tt.limits
			}
			s := Statuses(observeAll(tt.apps...), l)
			var clusters []string
			for _, e := range s.ClusterConditions {
				clusters = append(clusters, e.Cluster)
			}
			if !reflect.DeepEqual(clusters, tt.wantEntries) {
				t.Errorf("entries for clusters %v, want %v", clusters, tt.wantEntries)
			}
			if s.OmittedClusterConditions != tt.wantOmitted {
				t.Errorf("omittedClusterConditions = %d, want %d", s.OmittedClusterConditions, tt.wantOmitted)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// TestReportSizeAt3000Clusters builds the report of an ApplicationSet delivered to 3,000 clusters, with
// failures on some, and checks it stays far below the API server's object size limit (1.5 MiB).
func TestReportSizeAt3000Clusters(t *testing.T) {
	const clusters = 3000
	const apiServerLimit = 3 << 19 // 1.5 MiB
	longMessage := "rpc error: code = Unknown desc = " + strings.Repeat("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].image: Required value; ", 40)
	resources := make([]string, 25)
	for i := range resources {
		resources[i] = fmt.Sprintf("ConfigMap/config-%02d", i)
	}

	tests := []struct {
		name         string
		failing      int // clusters with a failed sync, a Degraded health and two long error conditions
		outOfSync    int // clusters OutOfSync with a warning
		progressing  int
		wantEntries  int
		wantOmitted  int32
		maxSizeBytes int
	}{
		{name: "all synced and healthy", wantEntries: 0, maxSizeBytes: 8 << 10},
		{name: "1% failing", failing: 30, wantEntries: 30, maxSizeBytes: 64 << 10},
		{name: "10% failing, 5% out of sync, 5% progressing", failing: 300, outOfSync: 150, progressing: 150,
			wantEntries: 500, wantOmitted: 100, maxSizeBytes: 512<<10 + 4<<10},
		{name: "every cluster failing", failing: clusters, wantEntries: 500, wantOmitted: 2500, maxSizeBytes: 512<<10 + 4<<10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			apps := make([]*argocd.Application, clusters)
			for i := range apps {
				cluster := fmt.Sprintf("cluster-%04d", i)
				var s map[string]any
				switch {
				case i < tt.failing:
					s = status("OutOfSync", "Degraded", withOperation("Failed", longMessage), withHealthMessage(longMessage),
						withConditions("SyncError", longMessage, "ComparisonError", longMessage))
				case i < tt.failing+tt.outOfSync:
					s = status("OutOfSync", "Healthy", withConditions("SharedResourceWarning", "ConfigMap/config-00 is part of applications a and b"))
				case i < tt.failing+tt.outOfSync+tt.progressing:
					s = status("Synced", "Progressing", withHealthMessage("Waiting for rollout to finish: 1 of 3 updated replicas are available..."))
				default:
					s = status("Synced", "Healthy")
				}
				withResources(resources...)(s)
				apps[i] = app("guestbook-"+cluster, cluster, s)
			}
			appSet := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "guestbook", UID: types.UID("u1")}}
			report := Build(appSet, observeAll(apps...), DefaultLimits())
			data, err := json.Marshal(report)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d clusters, %d failing: report of %d bytes (%.1f%% of the API server's limit), %d entries, %d omitted, %d resources",
				clusters, tt.failing, len(data), 100*float64(len(data))/apiServerLimit, len(report.Statuses.ClusterConditions),
				report.Statuses.OmittedClusterConditions, len(report.Statuses.Resources))
			if len(data) > tt.maxSizeBytes {
				t.Errorf("report is %d bytes, want at most %d", len(data), tt.maxSizeBytes)
			}
			if got := len(report.Statuses.ClusterConditions); got != tt.wantEntries {
				t.Errorf("%d entries, want %d", got, tt.wantEntries)
			}
			if report.Statuses.OmittedClusterConditions != tt.wantOmitted {
				t.Errorf("omitted %d, want %d", report.Statuses.OmittedClusterConditions, tt.wantOmitted)
			}
			if report.Statuses.Summary.Clusters != "3000" || len(report.Statuses.Resources) != len(resources) {
				t.Errorf("summary %+v, %d resources", report.Statuses.Summary, len(report.Statuses.Resources))
			}
			for _, e := range report.Statuses.ClusterConditions[:min(len(report.Statuses.ClusterConditions), tt.failing)] {
				if e.HealthStatus != "Degraded" {
					t.Errorf("entry %s is %s; the failing clusters must come first", e.Cluster, e.HealthStatus)
					break
				}
			}
		})
	}
}

func TestHostingAppSetLabel(t *testing.T) {
	tests := []struct{ namespace, name, want string }{
		{"apps", "guestbook", "apps.guestbook"},
		{"a-very-long-namespace-name-for-applications", "guestbook-applicationset-x", "a-very-long-namespace-name-for-applications.guestbook-applicati"},
		{"a-very-long-namespace-name-for-applications", "guestbook-applica--x", "a-very-long-namespace-name-for-applications.guestbook-applica"},
	}
	for _, tt := range tests {
		if got := HostingAppSetLabel(tt.namespace, tt.name); got != tt.want {
			t.Errorf("HostingAppSetLabel(%q, %q) = %q, want %q", tt.namespace, tt.name, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly-10", 10, "exactly-10"},
		{"a longer message", 10, "a longe..."},
		{"ééééé", 8, "éé..."},
	}
	for _, tt := range tests {
		if got := Truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// BenchmarkStatuses3000 is one evaluation of the report of an ApplicationSet on 3,000 clusters, 10% failing.
func BenchmarkStatuses3000(b *testing.B) {
	apps := make([]*argocd.Application, 3000)
	for i := range apps {
		s := status("Synced", "Healthy", withResources("ConfigMap/a", "Service/b", "Deployment/c"))
		if i%10 == 0 {
			s = status("OutOfSync", "Degraded", withConditions("SyncError", "one or more objects failed to apply"),
				withResources("ConfigMap/a", "Service/b", "Deployment/c"))
		}
		apps[i] = app(fmt.Sprintf("guestbook-%04d", i), fmt.Sprintf("cluster-%04d", i), s)
	}
	limits := DefaultLimits()
	b.ReportAllocs()
	for b.Loop() {
		observed := make([]Observed, len(apps))
		for i, a := range apps {
			observed[i] = Observe(a)
		}
		Statuses(observed, limits)
	}
}

// BenchmarkWriteBody encodes the update of a report of 3,000 clusters, 10 % of them failing: what the
// controller does for each write of a large report besides sending it.
func BenchmarkWriteBody(b *testing.B) {
	desired := benchReport()
	current := desired.DeepCopy()
	current.ResourceVersion = "42"
	b.ReportAllocs()
	for b.Loop() {
		data, err := json.Marshal(writeBody(current, desired))
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
	}
}

// benchReport is the report of 3,000 clusters, 10 % of them failing, each deploying the same 25 resources.
func benchReport() *v1alpha1.MulticlusterApplicationSetReport {
	longMessage := "rpc error: code = Unknown desc = " + strings.Repeat("Deployment.apps \"web\" is invalid; ", 20)
	resources := make([]string, 25)
	for i := range resources {
		resources[i] = fmt.Sprintf("ConfigMap/config-%02d", i)
	}
	apps := make([]*argocd.Application, 3000)
	for i := range apps {
		cluster := fmt.Sprintf("cluster-%04d", i)
		s := status("Synced", "Healthy")
		if i < 300 {
			s = status("OutOfSync", "Degraded", withOperation("Failed", longMessage), withConditions("SyncError", longMessage))
		}
		withResources(resources...)(s)
		apps[i] = app("guestbook-"+cluster, cluster, s)
	}
	appSet := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "guestbook", UID: types.UID("u1")}}
	return Build(appSet, observeAll(apps...), DefaultLimits())
}

// TestWriteBody: a new report is created as the controller builds it; an existing one is updated from the
// cached copy, keeping what others set on it and its resourceVersion as precondition, with the controller's
// label, owner and statuses and no managed fields (the apiserver keeps them). The body is encoded from the typed
// report in a few allocations (through an unstructured copy it took more than 20,000 for this report).
func TestWriteBody(t *testing.T) {
	desired := benchReport()
	if got := writeBody(nil, desired); got != desired {
		t.Errorf("the body of a new report is not the desired report")
	}
	current := desired.DeepCopy()
	current.ResourceVersion = "42"
	current.Labels = map[string]string{"team": "web", v1alpha1.LabelHostingAppSet: "stale"}
	current.Annotations = map[string]string{"note": "kept"}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "u2"}
	current.OwnerReferences = []metav1.OwnerReference{other}
	current.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "someone"}}
	current.Statuses = v1alpha1.AppConditions{}

	data, err := json.Marshal(writeBody(current, desired))
	if err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.MulticlusterApplicationSetReport
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "MulticlusterApplicationSetReport" || got.APIVersion != v1alpha1.GroupVersion.String() ||
		got.Name != "guestbook" || got.Namespace != "apps" || got.ResourceVersion != "42" {
		t.Errorf("update of %s %s/%s at resourceVersion %q, want the report at 42", got.Kind, got.Namespace, got.Name, got.ResourceVersion)
	}
	wantLabels := map[string]string{"team": "web", v1alpha1.LabelHostingAppSet: desired.Labels[v1alpha1.LabelHostingAppSet]}
	if !maps.Equal(got.Labels, wantLabels) || got.Annotations["note"] != "kept" {
		t.Errorf("labels %v, annotations %v; want %v and the annotation kept", got.Labels, got.Annotations, wantLabels)
	}
	if len(got.OwnerReferences) != 2 || got.OwnerReferences[0] != other || got.OwnerReferences[1].UID != desired.OwnerReferences[0].UID {
		t.Errorf("owner references %+v, want the other owner and the ApplicationSet", got.OwnerReferences)
	}
	if got.ManagedFields != nil {
		t.Errorf("the update sends managed fields: %+v", got.ManagedFields)
	}
	if !equality.Semantic.DeepEqual(got.Statuses, desired.Statuses) {
		t.Error("the update's statuses differ from the desired report's")
	}
	if current.Labels[v1alpha1.LabelHostingAppSet] != "stale" || len(current.OwnerReferences) != 1 || current.ManagedFields == nil {
		t.Error("building the update changed the cached copy")
	}
	// An owner already there is not added again.
	current.OwnerReferences = append(current.OwnerReferences, desired.OwnerReferences...)
	if refs := writeBody(current, desired).OwnerReferences; len(refs) != 2 {
		t.Errorf("owner references %+v, want the two owners once each", refs)
	}
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := json.Marshal(writeBody(current, desired)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 50 {
		t.Errorf("encoding the update took %.0f allocations, want at most 50", allocs)
	}
}

// TestSortRefs: the resources a report lists are the first of all of them in ACM's order, sorted, whatever order
// they come in and wherever the cut falls.
func TestSortRefs(t *testing.T) {
	ref := func(i int) v1alpha1.ResourceRef {
		// Names repeat so that kind, namespace and apiVersion decide too.
		return v1alpha1.ResourceRef{APIVersion: []string{"v1", "apps/v1"}[i%2], Kind: []string{"Service", "Deployment", "ConfigMap"}[i%3],
			Namespace: fmt.Sprintf("ns-%d", i%5), Name: fmt.Sprintf("web-%d", i/7)}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 100, 1000} {
		all := make([]v1alpha1.ResourceRef, n)
		for i := range all {
			all[i] = ref(i)
		}
		want := slices.Clone(all)
		slices.SortFunc(want, compareRefs)
		orders := map[string][]v1alpha1.ResourceRef{"sorted": want, "reversed": slices.Clone(want), "shuffled": slices.Clone(all)}
		slices.Reverse(orders["reversed"])
		rng.Shuffle(len(orders["shuffled"]), func(i, j int) {
			orders["shuffled"][i], orders["shuffled"][j] = orders["shuffled"][j], orders["shuffled"][i]
		})
		for name, in := range orders {
			for _, limit := range []int{0, 1, 3, n / 2, n - 1, n, n + 1} {
				if limit < 0 {
					continue
				}
				got, omitted := sortRefs(slices.Clone(in), limit)
				keep := min(limit, n)
				if !slices.Equal(got, want[:keep]) || int(omitted) != n-keep {
					t.Fatalf("%d resources %s, limit %d: got %d resources (%d omitted), want the first %d of %d sorted:\n%v\nwant\n%v",
						n, name, limit, len(got), omitted, keep, n, got, want[:keep])
				}
			}
		}
	}
}

// BenchmarkSortRefs lists the first 500 of 6,000 distinct resources, as a report of an ApplicationSet of 3,000
// Applications with two resources of their own each.
func BenchmarkSortRefs(b *testing.B) {
	all := make([]v1alpha1.ResourceRef, 6000)
	for i := range all {
		all[i] = v1alpha1.ResourceRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: fmt.Sprintf("ns-%d", i), Name: fmt.Sprintf("web-%d", i%3000)}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	refs := make([]v1alpha1.ResourceRef, len(all))
	for b.Loop() {
		copy(refs, all)
		sortRefs(refs, 500)
	}
}
