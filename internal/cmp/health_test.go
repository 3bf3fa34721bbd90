package cmp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// runHealthLua runs the health check the way Argo CD v3.2 does (util/lua: ExecuteHealthLua): a Lua state
// without the standard libraries except package, base and table (Argo CD adds a reduced os library, which the
// check does not use), the object as the global obj converted as Argo CD's decodeValue converts it, a one-second
// limit, and the returned table read as {status, message}.
func runHealthLua(t *testing.T, obj map[string]any) (status, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.fn), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			t.Fatalf("open %s: %v", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))
	if err := l.DoString(HealthLua); err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, want a table", l.Get(-1).Type())
	}
	status = lua.LVAsString(ret.RawGetString("status"))
	message = lua.LVAsString(ret.RawGetString("message"))
	switch status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		t.Fatalf("health.lua returned status %q, which Argo CD turns into Unknown", status)
	}
	return status, message
}

// decodeValue is Argo CD's conversion of an object into Lua values (util/lua/lua.go).
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

func loadFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "health", name))
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

// setFeedback sets (or, with nil, removes) a feedback value of the manifest with the given ordinal.
func setFeedback(t *testing.T, work map[string]any, ordinal int, name string, value any) {
	t.Helper()
	manifests, _, _ := unstructured.NestedSlice(work, "status", "resourceStatus", "manifests")
	m := manifests[ordinal].(map[string]any)
	values, _, _ := unstructured.NestedSlice(m, "statusFeedback", "values")
	var out []any
	for _, v := range values {
		if v.(map[string]any)["name"] != name {
			out = append(out, v)
		}
	}
	if value != nil {
		fv := map[string]any{}
		switch x := value.(type) {
		case int:
			fv["type"], fv["integer"] = "Integer", float64(x)
		case string:
			fv["type"], fv["string"] = "String", x
		case bool:
			fv["type"], fv["boolean"] = "Boolean", x
		}
		out = append(out, map[string]any{"name": name, "fieldValue": fv})
	}
	if err := unstructured.SetNestedSlice(m, out, "statusFeedback", "values"); err != nil {
		t.Fatal(err)
	}
	manifests[ordinal] = m
	if err := unstructured.SetNestedSlice(work, manifests, "status", "resourceStatus", "manifests"); err != nil {
		t.Fatal(err)
	}
}

func setManifestCondition(t *testing.T, work map[string]any, ordinal int, cond map[string]any) {
	t.Helper()
	manifests, _, _ := unstructured.NestedSlice(work, "status", "resourceStatus", "manifests")
	m := manifests[ordinal].(map[string]any)
	conds, _, _ := unstructured.NestedSlice(m, "conditions")
	var out []any
	for _, c := range conds {
		if c.(map[string]any)["type"] != cond["type"] {
			out = append(out, c)
		}
	}
	m["conditions"] = append(out, cond)
	if err := unstructured.SetNestedSlice(work, manifests, "status", "resourceStatus", "manifests"); err != nil {
		t.Fatal(err)
	}
}

func TestHealthLua(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		change  func(t *testing.T, w map[string]any)
		status  string
		message string
	}{
		{name: "not applied yet", fixture: "applying.yaml", status: "Progressing",
			message: "Waiting for the work agent of cluster cluster2 to apply the work"},
		{name: "applied and rolled out", fixture: "guestbook-healthy.yaml", status: "Healthy",
			message: "2 resources applied and available on cluster cluster1"},
		{name: "every workload kind healthy", fixture: "workloads-healthy.yaml", status: "Healthy",
			message: "6 resources applied and available on cluster cluster1"},
		{name: "a new generation not applied yet", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				w["metadata"].(map[string]any)["generation"] = float64(2)
			},
			message: "Waiting for the work agent of cluster cluster1 to apply generation 2"},
		{name: "deployment without feedback yet", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				_ = unstructured.SetNestedField(w["status"].(map[string]any)["resourceStatus"].(map[string]any)["manifests"].([]any)[1].(map[string]any), map[string]any{}, "statusFeedback")
			},
			message: "Deployment guestbook/guestbook-ui: Waiting for the work agent to report the status"},
		{name: "deployment rolling out", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "UpdatedReplicas", 1) },
			message: "Deployment guestbook/guestbook-ui: Waiting for rollout to finish: 1 out of 2 new replicas have been updated..."},
		{name: "deployment with old replicas", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "Replicas", 3) },
			message: "Deployment guestbook/guestbook-ui: Waiting for rollout to finish: 1 old replicas are pending termination..."},
		{name: "deployment replicas not available", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "AvailableReplicas", nil) },
			message: "Deployment guestbook/guestbook-ui: Waiting for rollout to finish: 0 of 2 updated replicas are available..."},
		{name: "deployment generation not observed", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "Generation", 2) },
			message: "Deployment guestbook/guestbook-ui: Waiting for rollout to finish: observed deployment generation less than desired generation"},
		{name: "deployment past its progress deadline", fixture: "guestbook-healthy.yaml", status: "Degraded",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 1, "AvailableReplicas", 0)
				setFeedback(t, w, 1, "ProgressingReason", "ProgressDeadlineExceeded")
				setFeedback(t, w, 1, "ProgressingMessage", `ReplicaSet "guestbook-ui-6b5f" has timed out progressing.`)
			},
			message: `Deployment guestbook/guestbook-ui: Deployment "guestbook-ui" exceeded its progress deadline: ReplicaSet "guestbook-ui-6b5f" has timed out progressing.`},
		{name: "deployment paused", fixture: "guestbook-healthy.yaml", status: "Suspended",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "Paused", true) },
			message: "Deployment guestbook/guestbook-ui: Deployment is paused"},
		{name: "deployment scaled down on the cluster", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				for _, n := range []string{"DesiredReplicas", "Replicas", "UpdatedReplicas", "ReadyReplicas", "AvailableReplicas"} {
					setFeedback(t, w, 1, n, 0)
				}
			},
			message: "Deployment guestbook/guestbook-ui: The cluster runs 0 replicas, the work asks for 2: waiting for the work agent to apply it again"},
		{name: "resource deleted on the cluster", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				setManifestCondition(t, w, 0, map[string]any{"type": "Available", "status": "False", "reason": "ResourceNotAvailable", "message": "Resource is not available"})
			},
			message: "Service guestbook/guestbook-ui: Resource is not available"},
		{name: "a manifest fails to apply", fixture: "apply-failed.yaml", status: "Degraded",
			message: `ServiceMonitor monitoring/app: Failed to apply manifest: the server doesn't have a resource type "ServiceMonitor"`},
		{name: "degraded wins over progressing and counts the others", fixture: "workloads-healthy.yaml", status: "Degraded",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 0, "Phase", "Lost")
				setFeedback(t, w, 5, "JobComplete", nil)
				setFeedback(t, w, 5, "JobFailed", "True")
				setFeedback(t, w, 5, "JobFailedMessage", "Job has reached the specified backoff limit")
				setFeedback(t, w, 4, "ReadyReplicas", 1)
			},
			message: "PersistentVolumeClaim apps/data (and 1 more)"},
		{name: "job failed", fixture: "workloads-healthy.yaml", status: "Degraded",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 5, "JobFailed", "True")
				setFeedback(t, w, 5, "JobFailedMessage", "Job has reached the specified backoff limit")
			},
			message: "Job apps/migrate: Job has reached the specified backoff limit"},
		{name: "job running", fixture: "workloads-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 5, "JobComplete", nil) },
			message: "Job apps/migrate"},
		{name: "statefulset pods not ready", fixture: "workloads-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 4, "ReadyReplicas", 1) },
			message: "StatefulSet apps/db: Waiting for 2 pods to be ready..."},
		{name: "statefulset rolling update", fixture: "workloads-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 4, "UpdateRevision", "db-6c8e")
				setFeedback(t, w, 4, "UpdatedReplicas", 1)
			},
			message: "StatefulSet apps/db: waiting for statefulset rolling update to complete 1 pods at revision db-6c8e..."},
		{name: "daemonset rolling out", fixture: "workloads-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "UpdatedNumberScheduled", 2) },
			message: `DaemonSet apps/agent: Waiting for daemon set "agent" rollout to finish: 2 out of 3 new pods have been updated...`},
		{name: "daemonset pods not available", fixture: "workloads-healthy.yaml", status: "Progressing",
			change:  func(t *testing.T, w map[string]any) { setFeedback(t, w, 1, "NumberAvailable", 1) },
			message: `DaemonSet apps/agent: Waiting for daemon set "agent" rollout to finish: 1 of 3 updated pods are available...`},
		{name: "replicaset failing", fixture: "workloads-healthy.yaml", status: "Degraded",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 3, "ReplicaFailure", "True")
				setFeedback(t, w, 3, "ReplicaFailureMessage", `pods "cache-x" is forbidden: exceeded quota`)
			},
			message: `ReplicaSet apps/cache: pods "cache-x" is forbidden: exceeded quota`},
		{name: "pod not ready", fixture: "workloads-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 2, "PodReady", "False")
				setFeedback(t, w, 2, "PodMessage", "containers with unready status: [d]")
			},
			message: "Pod apps/debug: containers with unready status: [d]"},
		{name: "pod failed", fixture: "workloads-healthy.yaml", status: "Degraded",
			change: func(t *testing.T, w map[string]any) {
				setFeedback(t, w, 2, "PodPhase", "Failed")
				setFeedback(t, w, 2, "PodMessage", "The node was low on resource: memory.")
			},
			message: "Pod apps/debug: The node was low on resource: memory."},
		{name: "work being deleted", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				w["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
			},
			message: "The work agent of cluster cluster1 is removing the resources"},
		{name: "resources not available yet", fixture: "guestbook-healthy.yaml", status: "Progressing",
			change: func(t *testing.T, w map[string]any) {
				conds := w["status"].(map[string]any)["conditions"].([]any)
				conds[1] = map[string]any{"type": "Available", "status": "Unknown", "reason": "ResourcesStatusUnknown", "message": "1 of 2 resources have unknown status", "observedGeneration": float64(1)}
			},
			message: "Waiting for the resources to be available on cluster cluster1: 1 of 2 resources have unknown status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := loadFixture(t, tt.fixture)
			if tt.change != nil {
				tt.change(t, work)
			}
			status, message := runHealthLua(t, work)
			if status != tt.status || message != tt.message {
				t.Errorf("health = %s %q\nwant       %s %q", status, message, tt.status, tt.message)
			}
		})
	}
}

// TestHealthLuaReadsTheFeedbackBuildWorksAsksFor keeps health.lua and statusFeedback in step: every kind with
// feedback has a check, and every value a check reads is one the work agent is asked to report.
func TestHealthLuaReadsTheFeedbackBuildWorksAsksFor(t *testing.T) {
	checkRE := regexp.MustCompile(`(?s)checks\["([a-z.]*)/(\w+)"\] = function\(v, name, desired\)(.*?)\nend\n`)
	valueRE := regexp.MustCompile(`\bv\.(\w+)`)
	checked := map[string]bool{}
	for _, m := range checkRE.FindAllStringSubmatch(HealthLua, -1) {
		key := m[1] + "/" + m[2]
		checked[key] = true
		asked := map[string]bool{}
		for gk, paths := range statusFeedback {
			if gk.Group == m[1] && gk.Kind == m[2] {
				for _, p := range paths {
					asked[p.Name] = true
				}
			}
		}
		if len(asked) == 0 {
			t.Errorf("health.lua checks %s, for which BuildWorks asks no feedback", key)
			continue
		}
		var unknown []string
		for _, v := range valueRE.FindAllStringSubmatch(m[3], -1) {
			if !asked[v[1]] {
				unknown = append(unknown, v[1])
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			t.Errorf("health.lua's %s check reads %s, which BuildWorks does not ask for", key, strings.Join(unknown, ", "))
		}
	}
	for gk := range statusFeedback {
		if !checked[gk.Group+"/"+gk.Kind] {
			t.Errorf("BuildWorks asks feedback for %s, which health.lua does not check", gk)
		}
	}
}
