package consoleagent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactManagedResources(t *testing.T) {
	target := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"stringData":{"password":"hunter2"},"data":{"user":"YWRtaW4="}}`
	live := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"aHVudGVyMg==\"}}"}},"data":{"password":"b2xk","user":"YWRtaW4="}}`
	diffs := []map[string]any{
		{"kind": "Secret", "name": "db", "targetState": target, "liveState": live, "normalizedLiveState": live, "diff": `{"data":{"password":"b2xk"}}`},
		{"kind": "ConfigMap", "name": "cm", "liveState": `{"kind":"ConfigMap","data":{"color":"blue"}}`},
		{"group": "example.com", "kind": "Secret", "name": "not-core", "liveState": `{"kind":"Secret","data":{"x":"y"}}`},
	}
	in, _ := json.Marshal(diffs)
	out, err := redactManagedResources(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"hunter2", "aHVudGVyMg", "b2xk", "YWRtaW4"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("managed resources still hold %q: %s", secret, out)
		}
	}
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got[0]["diff"]; ok {
		t.Error("a Secret's raw diff was kept")
	}
	data := func(field string) map[string]any {
		var obj map[string]any
		if err := json.Unmarshal([]byte(got[0][field].(string)), &obj); err != nil {
			t.Fatal(err)
		}
		return obj["data"].(map[string]any)
	}
	tgt, lv := data("targetState"), data("liveState")
	// The same user on both sides: the same replacement; different passwords: different ones.
	if tgt["user"] != lv["user"] || tgt["password"] == lv["password"] {
		t.Errorf("replacements do not keep the diff: target %v live %v", tgt, lv)
	}
	if !strings.HasPrefix(tgt["password"].(string), mask) {
		t.Errorf("replacement %q", tgt["password"])
	}
	if !strings.Contains(got[1]["liveState"].(string), "blue") || !strings.Contains(got[2]["liveState"].(string), `"x":"y"`) {
		t.Errorf("other kinds were changed: %v", got[1:])
	}
}

func TestRedactObject(t *testing.T) {
	secret := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"k":"c2VjcmV0"}}`
	out, err := redactObject([]byte(secret))
	if err != nil || strings.Contains(string(out), "c2VjcmV0") || !strings.Contains(string(out), mask) {
		t.Errorf("redactObject(secret) = %s, %v", out, err)
	}
	list := `{"kind":"SecretList","apiVersion":"v1","items":[{"metadata":{"name":"s"},"data":{"k":"c2VjcmV0"}}]}`
	if out, err := redactObject([]byte(list)); err != nil || strings.Contains(string(out), "c2VjcmV0") {
		t.Errorf("redactObject(list) = %s, %v", out, err)
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`
	if out, err := redactObject([]byte(pod)); err != nil || string(out) != pod {
		t.Errorf("redactObject(pod) = %s, %v", out, err)
	}
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		path string
		want apiPath
		err  bool
	}{
		{"/version", apiPath{discovery: true}, false},
		{"/api", apiPath{discovery: true}, false},
		{"/apis", apiPath{discovery: true}, false},
		{"/api/v1", apiPath{discovery: true, version: "v1"}, false},
		{"/apis/apps", apiPath{discovery: true, group: "apps"}, false},
		{"/apis/apps/v1", apiPath{discovery: true, group: "apps", version: "v1"}, false},
		{"/apis/apps/v1/namespaces/gb/deployments/guestbook-ui", apiPath{group: "apps", version: "v1", namespace: "gb", resource: "deployments", name: "guestbook-ui"}, false},
		{"/api/v1/namespaces/gb/pods/p1/log", apiPath{version: "v1", namespace: "gb", resource: "pods", name: "p1", sub: "log"}, false},
		{"/api/v1/namespaces/gb/events", apiPath{version: "v1", namespace: "gb", resource: "events"}, false},
		{"/api/v1/namespaces/gb", apiPath{version: "v1", resource: "namespaces", name: "gb"}, false},
		{"/api/v1/nodes/n1", apiPath{version: "v1", resource: "nodes", name: "n1"}, false},
		{"/healthz", apiPath{}, true},
		{"/api/v1/namespaces/gb/pods/p1/log/extra", apiPath{}, true},
		{"/api/v1/namespaces/gb/pods//log", apiPath{}, true},
	}
	for _, tt := range tests {
		got, err := parsePath(tt.path)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parsePath(%q) = %+v, %v", tt.path, got, err)
		}
	}
}
