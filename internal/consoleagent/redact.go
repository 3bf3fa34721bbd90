package consoleagent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// lastApplied is kubectl's annotation with the whole object it applied: a Secret's data, again.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// mask is the shortest replacement of a Secret value. As Argo CD does, equal values get equal replacements and
// different values replacements of different lengths, so that a diff still shows which values differ.
const mask = "++++++++"

// masker gives each distinct value of a key its replacement.
type masker map[string]map[string]string

func (m masker) replace(key, value string) string {
	byValue := m[key]
	if byValue == nil {
		byValue = map[string]string{}
		m[key] = byValue
	}
	r, ok := byValue[value]
	if !ok {
		r = mask + strings.Repeat("+", len(byValue))
		byValue[value] = r
	}
	return r
}

// redactSecret replaces the values of a Secret object (decoded JSON) in place: stringData is folded into data
// (base64, as the API server would store it), every data value is replaced, and the last-applied annotation,
// which holds the data too, is replaced whole.
func redactSecret(obj map[string]any, m masker) {
	if obj == nil {
		return
	}
	data, _ := obj["data"].(map[string]any)
	if sd, ok := obj["stringData"].(map[string]any); ok {
		if data == nil {
			data = map[string]any{}
		}
		for k, v := range sd {
			s, _ := v.(string)
			data[k] = base64.StdEncoding.EncodeToString([]byte(s))
		}
		delete(obj, "stringData")
	}
	for k, v := range data {
		s, _ := v.(string)
		data[k] = m.replace(k, s)
	}
	if data != nil {
		obj["data"] = data
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if ann, ok := meta["annotations"].(map[string]any); ok {
			if _, ok := ann[lastApplied]; ok {
				ann[lastApplied] = mask
			}
		}
	}
}

// isSecret reports whether a decoded object is a core Secret.
func isSecret(obj map[string]any) bool {
	return obj != nil && obj["kind"] == "Secret" && (obj["apiVersion"] == "v1" || obj["apiVersion"] == nil)
}

// redactManagedResources replaces Secret data in an Application's managed resources (Argo CD's ResourceDiff
// list, JSON): in each Secret's target, live, normalized and predicted state, with one masker per Secret so
// that the diff between them still shows which values changed, and without its raw diff.
func redactManagedResources(data []byte) ([]byte, error) {
	var diffs []map[string]any
	if err := json.Unmarshal(data, &diffs); err != nil {
		return nil, fmt.Errorf("decode managed resources: %w", err)
	}
	for _, d := range diffs {
		if d["kind"] != "Secret" || (d["group"] != nil && d["group"] != "") {
			continue
		}
		m := masker{}
		for _, field := range []string{"targetState", "liveState", "normalizedLiveState", "predictedLiveState"} {
			s, _ := d[field].(string)
			if s == "" || s == "null" {
				continue
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(s), &obj); err != nil {
				// A state that does not decode cannot be redacted: it does not leave.
				d[field] = ""
				continue
			}
			redactSecret(obj, m)
			out, err := json.Marshal(obj)
			if err != nil {
				return nil, fmt.Errorf("encode redacted secret: %w", err)
			}
			d[field] = string(out)
		}
		delete(d, "diff")
	}
	return json.Marshal(diffs)
}

// redactObject replaces Secret data in a kube answer: a Secret, or a list that holds Secrets.
func redactObject(body []byte) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	changed := false
	if isSecret(obj) {
		redactSecret(obj, masker{})
		changed = true
	}
	if items, ok := obj["items"].([]any); ok && (obj["kind"] == "SecretList" || hasSecret(items)) {
		for _, it := range items {
			if o, ok := it.(map[string]any); ok && (obj["kind"] == "SecretList" || isSecret(o)) {
				redactSecret(o, masker{})
			}
		}
		changed = true
	}
	if !changed {
		return body, nil
	}
	return json.Marshal(obj)
}

func hasSecret(items []any) bool {
	for _, it := range items {
		if o, ok := it.(map[string]any); ok && isSecret(o) {
			return true
		}
	}
	return false
}
