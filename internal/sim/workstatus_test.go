package sim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/ocm/pkg/work/spoke/statusfeedback"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// deliveredWork returns the work the hub controller builds for a hub Application, as an agent decodes it.
func deliveredWork(t *testing.T, hub *unstructured.Unstructured) *workv1.ManifestWork {
	t.Helper()
	w, err := application.BuildWork(hub, application.BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	out := &workv1.ManifestWork{}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	out.Generation = 1
	return out
}

// agentStatus runs the agent's two steps on a work: apply (Applied), then read the status (Available, feedback).
func agentStatus(t *testing.T, w *workv1.ManifestWork, cfg *ArgoConfig, a *app, limit int32) (*unstructured.Unstructured, valuesReader) {
	t.Helper()
	results, m := readManifests(w)
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("manifest %d: %v", r.meta.Ordinal, r.err)
		}
	}
	if m == nil || m.name != a.name {
		t.Fatalf("the work's application is %+v", m)
	}
	w.Status = appliedStatus(w, results)
	obj := argocd.NewApplication()
	obj.SetName(a.name)
	obj.SetNamespace(a.namespace)
	obj.Object["status"] = cfg.status(a)
	reader := newFeedbackReader(limit)
	w.Status = availableStatus(w, liveObjects(w, obj), reader)
	return obj, reader
}

// TestFeedbackRoundTrip: the feedback the simulated agent sends for each state of the simulated Argo CD is
// what the real agent's reader gives for the object as an API server returns it, and the hub's
// appstatus.StatusFromFeedback rebuilds the simulated status from it: whole under the gRPC limit; under the
// kube limit, every section that fits and the scalar fields for the others, with the agent's condition.
func TestFeedbackRoundTrip(t *testing.T) {
	if err := workclient.EnableRawFeedback(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	good, bad := "https://git.example.com/apps.git", "https://invalid.example.com/x.git"
	states := []struct {
		name      string
		resources int
		prepare   func(cfg *ArgoConfig, a *app)
	}{
		{"syncing", 2, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, nil)), t0, time.Second)
		}},
		{"synced", 2, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, nil)), t0, time.Second)
			a.advance(t0.Add(time.Second))
		}},
		{"degraded after drift", 1, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, nil)), t0, time.Second)
			a.advance(t0.Add(time.Second))
			a.flip(false, t0.Add(time.Minute))
		}},
		{"invalid repository", 2, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", bad, nil)), t0, time.Second)
		}},
		{"operation from the hub", 3, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, nil)), t0, time.Second)
			a.advance(t0.Add(time.Second))
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, manualSync)), t0.Add(time.Minute), time.Second)
			a.advance(t0.Add(time.Minute + time.Second))
		}},
		{"many resources", 40, func(cfg *ArgoConfig, a *app) {
			cfg.apply(a, manifestOfApp(hubApplication("guestbook", good, nil)), t0, time.Second)
			a.advance(t0.Add(time.Second))
		}},
	}
	for _, limit := range []int32{workclient.KubeMaxJSONRawLength, workclient.GRPCMaxJSONRawLength} {
		for _, s := range states {
			t.Run(fmt.Sprintf("%s/limit %d", s.name, limit), func(t *testing.T) {
				cfg := &ArgoConfig{SyncDelay: time.Second, InvalidRepo: regexp.MustCompile(`invalid`), ResourcesPerApp: s.resources}
				a := &app{}
				s.prepare(cfg, a)
				w := deliveredWork(t, hubApplication("guestbook", good, nil))
				obj, _ := agentStatus(t, w, cfg, a, limit)
				m := w.Status.ResourceStatus.Manifests[0]
				values := m.StatusFeedbacks.Values

				// What the real reader gives for the object as an API server returns it (JSON numbers as int64).
				data, err := json.Marshal(obj.Object)
				if err != nil {
					t.Fatal(err)
				}
				live := &unstructured.Unstructured{}
				if err := live.UnmarshalJSON(data); err != nil {
					t.Fatal(err)
				}
				option := &w.Spec.ManifestConfigs[0]
				agent := statusfeedback.NewStatusReader().WithMaxJsonRawLength(limit)
				want, wantCond := feedbackValues(live, option, agent)
				if !equality.Semantic.DeepEqual(values, want) {
					t.Errorf("feedback values differ from the agent reader's on the live object:\n got %v\nwant %v", values, want)
				}

				// The sections that do not fit, with the agent's condition.
				status := cfg.status(a)
				var over []string
				for _, section := range appstatus.Sections {
					if v, ok := status[section]; ok {
						if _, isString := v.(string); isString {
							continue
						}
						raw, _ := json.Marshal(v)
						if len(raw) > int(limit) {
							over = append(over, fmt.Sprintf("the length of returned json raw string for name status.%s is larger than the maximum length %d", section, limit))
						}
					}
				}
				cond := meta.FindStatusCondition(m.Conditions, statusFeedbackSynced)
				if cond == nil || cond.Status != wantCond.Status || cond.Message != wantCond.Message {
					t.Fatalf("StatusFeedbackSynced = %+v, want %+v", cond, wantCond)
				}
				switch {
				case len(over) == 0 && cond.Status != metav1.ConditionTrue:
					t.Errorf("StatusFeedbackSynced = %+v, want True", cond)
				case len(over) == 1 && cond.Message != "Sync status feedback failed with error "+over[0]:
					t.Errorf("StatusFeedbackSynced message = %q, want the agent's for %s", cond.Message, over[0])
				case len(over) > 1 && cond.Message != "Sync status feedback failed with error ["+strings.Join(over, ", ")+"]":
					t.Errorf("StatusFeedbackSynced message = %q, want the agent's for %v", cond.Message, over)
				}

				// The hub's rebuild.
				rebuilt, errs := appstatus.StatusFromFeedback(values)
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				expect := expectedRebuild(t, status, limit)
				if !reflect.DeepEqual(normalize(t, rebuilt), normalize(t, expect)) {
					got, _ := json.Marshal(rebuilt)
					exp, _ := json.Marshal(expect)
					t.Errorf("rebuilt status:\n got %s\nwant %s", got, exp)
				}

				// The whole delivery as the hub controller reads it.
				d := appstatus.FromWork(w, appstatus.Options{Now: t0})
				warned := slices.ContainsFunc(d.Conditions, func(c appstatus.Condition) bool { return c.Type == argocd.ConditionDeliveryWarning })
				others := slices.ContainsFunc(d.Conditions, func(c appstatus.Condition) bool { return c.Type != argocd.ConditionDeliveryWarning })
				if !d.Applied || warned != (len(over) > 0) || others {
					t.Errorf("delivery = applied %v, conditions %+v; want applied, a warning only for %d sections over the limit", d.Applied, d.Conditions, len(over))
				}
			})
		}
	}
}

func manifestOfApp(hub *unstructured.Unstructured) *manifestApp {
	raw, _ := json.Marshal(hub.Object)
	m, err := parseApplication(raw)
	if err != nil {
		panic(err)
	}
	return m
}

// expectedRebuild is the status the hub should rebuild: every section that fits the limit, the scalar fields of
// those that do not, never reconciledAt.
func expectedRebuild(t *testing.T, status map[string]any, limit int32) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, section := range appstatus.Sections {
		v, ok := status[section]
		if !ok {
			continue
		}
		raw, _ := json.Marshal(v)
		if _, isString := v.(string); isString || len(raw) <= int(limit) {
			out[section] = v
		}
	}
	if _, ok := out["sync"]; !ok {
		sync := status["sync"].(map[string]any)
		out["sync"] = map[string]any{"status": sync["status"], "revision": sync["revision"]}
	}
	if _, ok := out["health"]; !ok {
		out["health"] = map[string]any{"status": status["health"].(map[string]any)["status"]}
	}
	if op, ok := status["operationState"].(map[string]any); ok {
		if _, fits := out["operationState"]; !fits {
			scalar := map[string]any{"operation": map[string]any{}, "phase": op["phase"], "startedAt": op["startedAt"]}
			for _, k := range []string{"finishedAt", "message"} {
				if v, ok := op[k]; ok {
					scalar[k] = v
				}
			}
			out["operationState"] = scalar
		}
	}
	return out
}

// normalize passes a value through JSON so that numbers compare alike.
func normalize(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentConditions: the conditions of a delivered work are the work agent's, for a work with a Namespace
// manifest before its Application, and a new generation updates the observed generations.
func TestAgentConditions(t *testing.T) {
	if err := workclient.EnableRawFeedback(); err != nil {
		t.Fatal(err)
	}
	hub := hubApplication("guestbook", "https://git.example.com/apps.git", nil)
	hub.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: "cluster1", argocd.AnnotationAppNamespace: "team-a"})
	w := deliveredWork(t, hub)
	cfg := &ArgoConfig{SyncDelay: time.Second, ResourcesPerApp: 1}
	a := &app{}
	_, m := readManifests(w)
	cfg.apply(a, m, time.Now(), time.Second)
	obj, reader := agentStatus(t, w, cfg, a, workclient.GRPCMaxJSONRawLength)

	type cond struct {
		Type, Status, Reason string
		Gen                  int64
	}
	conds := func(cs []metav1.Condition) []cond {
		var out []cond
		for _, c := range cs {
			out = append(out, cond{c.Type, string(c.Status), c.Reason, c.ObservedGeneration})
		}
		// The agent moves a condition whose generation changed to the end; the order does not matter here.
		slices.SortFunc(out, func(a, b cond) int { return strings.Compare(a.Type, b.Type) })
		return out
	}
	check := func(gen int64) {
		t.Helper()
		if got, want := conds(w.Status.Conditions), []cond{
			{workv1.WorkApplied, "True", "AppliedManifestWorkComplete", gen},
			{workv1.WorkAvailable, "True", "ResourcesAvailable", gen},
		}; !reflect.DeepEqual(got, want) {
			t.Errorf("work conditions = %v, want %v", got, want)
		}
		ms := w.Status.ResourceStatus.Manifests
		if len(ms) != 2 {
			t.Fatalf("manifests = %+v", ms)
		}
		if got, want := ms[0].ResourceMeta, (workv1.ManifestResourceMeta{Ordinal: 0, Version: "v1", Kind: "Namespace",
			Resource: "namespaces", Name: "team-a"}); got != want {
			t.Errorf("namespace manifest = %+v, want %+v", got, want)
		}
		if got, want := ms[1].ResourceMeta, (workv1.ManifestResourceMeta{Ordinal: 1, Group: argocd.Group, Version: argocd.Version,
			Kind: "Application", Resource: "applications", Name: "guestbook", Namespace: "team-a"}); got != want {
			t.Errorf("application manifest = %+v, want %+v", got, want)
		}
		if got, want := conds(ms[0].Conditions), []cond{
			{workv1.ManifestApplied, "True", "AppliedManifestComplete", gen},
			{workv1.ManifestAvailable, "True", "ResourceAvailable", 0},
			{statusFeedbackSynced, "True", "NoStatusFeedbackSynced", 0},
		}; !reflect.DeepEqual(got, want) {
			t.Errorf("namespace conditions = %v, want %v", got, want)
		}
		if got, want := conds(ms[1].Conditions), []cond{
			{workv1.ManifestApplied, "True", "AppliedManifestComplete", gen},
			{workv1.ManifestAvailable, "True", "ResourceAvailable", 0},
			{statusFeedbackSynced, "True", "StatusFeedbackSynced", 0},
		}; !reflect.DeepEqual(got, want) {
			t.Errorf("application conditions = %v, want %v", got, want)
		}
		names := map[string]workv1.ValueType{}
		for _, v := range ms[1].StatusFeedbacks.Values {
			names[v.Name] = v.Value.Type
		}
		for name, typ := range map[string]workv1.ValueType{
			"syncStatus": workv1.String, "healthStatus": workv1.String, "revision": workv1.String, "operationPhase": workv1.String,
			"status.sync": workv1.JsonRaw, "status.health": workv1.JsonRaw, "status.resources": workv1.JsonRaw,
			"status.operationState": workv1.JsonRaw, "status.summary": workv1.JsonRaw, "status.controllerNamespace": workv1.String,
			"status.resourceHealthSource": workv1.String, "status.sourceType": workv1.String,
		} {
			if names[name] != typ {
				t.Errorf("feedback %s has type %q, want %q (values %v)", name, names[name], typ, names)
			}
		}
		if _, ok := names["status.reconciledAt"]; ok {
			t.Error("reconciledAt is fed back")
		}
	}
	check(1)

	// Nothing changed: the agent would not patch; a vanished Application changes the status.
	if same := availableStatus(w, liveObjects(w, obj), reader); !statusEqual(&same, &w.Status) {
		t.Error("reading an unchanged application changes the status")
	}
	if gone := availableStatus(w, liveObjects(w, nil), reader); statusEqual(&gone, &w.Status) {
		t.Error("a vanished application does not change the status")
	}

	// A new generation.
	w.Generation = 2
	results, _ := readManifests(w)
	w.Status = appliedStatus(w, results)
	if meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied).ObservedGeneration != 2 {
		t.Fatalf("applied condition = %+v", w.Status.Conditions)
	}
	agentStatus(t, w, cfg, a, workclient.GRPCMaxJSONRawLength)
	check(2)
}

func TestResourceOf(t *testing.T) {
	for kind, want := range map[string]string{
		"Application": "applications", "Namespace": "namespaces", "NetworkPolicy": "networkpolicies",
		"Ingress": "ingresses", "Gateway": "gateways", "AppProject": "appprojects",
	} {
		if got := resourceOf(kind); got != want {
			t.Errorf("resourceOf(%s) = %s, want %s", kind, got, want)
		}
	}
}

// BenchmarkAgentStatus measures what the simulated agent does for one status of one Application: build the
// simulated status, read the feedback with the agent's reader and compose the work status.
func BenchmarkAgentStatus(b *testing.B) {
	if err := workclient.EnableRawFeedback(); err != nil {
		b.Fatal(err)
	}
	cfg := &ArgoConfig{SyncDelay: time.Second, ResourcesPerApp: 2}
	a := &app{}
	now := time.Now()
	cfg.apply(a, manifestOfApp(hubApplication("guestbook", goodRepo, nil)), now, time.Second)
	a.advance(now.Add(time.Second))
	t := &testing.T{}
	w := deliveredWork(t, hubApplication("guestbook", goodRepo, nil))
	results, _ := readManifests(w)
	w.Status = appliedStatus(w, results)
	reader := newFeedbackReader(workclient.GRPCMaxJSONRawLength)
	b.ReportAllocs()
	for b.Loop() {
		obj := argocd.NewApplication()
		obj.SetName(a.name)
		obj.SetNamespace(a.namespace)
		obj.Object["status"] = cfg.status(a)
		_ = availableStatus(w, liveObjects(w, obj), reader)
	}
}

// TestFeedbackReader: the simulator's reader gives what the agent's StatusReader gives, values and errors,
// for simple paths, paths it hands over to the agent's reader, and values of every type and size.
func TestFeedbackReader(t *testing.T) {
	if err := workclient.EnableRawFeedback(); err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON([]byte(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
		"metadata":{"name":"a","namespace":"argocd","generation":3},
		"status":{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"},"nothing":null,
		"big":{"list":[` + strings.Repeat(`"0123456789",`, 120) + `"x"]},"flag":true,"ratio":0.5,"count":7,"empty":{},"list":[],
		"operationState":{"operation":{"info":[{"name":"argocd-pull.io/operation","value":"m1"},{"name":"other","value":"v"}]}}}}`)); err != nil {
		t.Fatal(err)
	}
	rules := []workv1.FeedbackRule{
		{Type: workv1.JSONPathsType, JsonPaths: []workv1.JsonPath{
			{Name: "sync", Path: ".status.sync.status"},
			{Name: "syncSection", Path: ".status.sync"},
			{Name: "missing", Path: ".status.missing.deeper"},
			{Name: "throughString", Path: ".status.sync.status.deeper"},
			{Name: "null", Path: ".status.nothing"},
			{Name: "big", Path: ".status.big"},
			{Name: "flag", Path: ".status.flag"},
			{Name: "ratio", Path: ".status.ratio"},
			{Name: "count", Path: ".status.count"},
			{Name: "generation", Path: ".metadata.generation"},
			{Name: "empty", Path: ".status.empty"},
			{Name: "list", Path: ".status.list"},
			{Name: "marker", Path: `.status.operationState.operation.info[?(@.name=="argocd-pull.io/operation")].value`},
			{Name: "names", Path: `.status.operationState.operation.info[*].name`},
			{Name: "bad", Path: `.status.[`},
			{Name: "otherVersion", Path: ".status.sync", Version: "v1beta1"},
			{Name: "sameVersion", Path: ".status.health", Version: "v1alpha1"},
		}},
		{Type: workv1.JSONPathsType, JsonPaths: []workv1.JsonPath{{Name: "bigAgain", Path: ".status.big"}}},
		{Type: workv1.WellKnownStatusType},
	}
	for _, limit := range []int32{workclient.KubeMaxJSONRawLength, workclient.GRPCMaxJSONRawLength} {
		agent := statusfeedback.NewStatusReader().WithMaxJsonRawLength(limit)
		fast := newFeedbackReader(limit)
		for _, rule := range rules {
			want, wantErr := agent.GetValuesByRule(obj, rule)
			for range 2 { // the second time from the reader's path cache
				got, err := fast.GetValuesByRule(obj, rule)
				if !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("limit %d, rule %s: values\n got %v\nwant %v", limit, rule.Type, got, want)
				}
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Errorf("limit %d, rule %s: error\n got %v\nwant %v", limit, rule.Type, err, wantErr)
				}
			}
		}
		// And the condition the agent builds from them.
		option := &workv1.ManifestConfigOption{FeedbackRules: rules}
		gotValues, gotCond := feedbackValues(obj, option, fast)
		wantValues, wantCond := feedbackValues(obj, option, agent)
		if !equality.Semantic.DeepEqual(gotValues, wantValues) || gotCond != wantCond {
			t.Errorf("limit %d: condition\n got %+v\nwant %+v", limit, gotCond, wantCond)
		}
	}
}
