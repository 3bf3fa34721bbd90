package sim

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	ocmfeature "open-cluster-management.io/api/feature"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/ocm/pkg/features"
	"open-cluster-management.io/ocm/pkg/work/spoke/statusfeedback"
)

// feedbackReader reads feedback values exactly as the work agent's StatusReader does, but walks the simple
// dotted paths (".status.sync.status") itself instead of parsing them as JSONPath templates on every read,
// which is most of the reader's cost. Every other path and rule goes to the agent's reader.
// TestFeedbackRoundTrip and TestFeedbackReader compare the two.
type feedbackReader struct {
	agent  *statusfeedback.StatusReader
	maxRaw int
	paths  sync.Map // path -> []string (its fields) or nil (not a simple path)
}

var _ valuesReader = (*feedbackReader)(nil)

func newFeedbackReader(maxRaw int32) *feedbackReader {
	return &feedbackReader{agent: statusfeedback.NewStatusReader().WithMaxJsonRawLength(maxRaw), maxRaw: int(maxRaw)}
}

var simplePath = regexp.MustCompile(`^(\.[A-Za-z0-9_]+)+$`)

// fields returns the fields of a simple dotted path, or nil.
func (r *feedbackReader) fields(path string) []string {
	if v, ok := r.paths.Load(path); ok {
		return v.([]string)
	}
	var fields []string
	if simplePath.MatchString(path) {
		fields = strings.Split(path[1:], ".")
	}
	r.paths.Store(path, fields)
	return fields
}

// GetValuesByRule returns the values of one feedback rule, with the agent reader's errors.
func (r *feedbackReader) GetValuesByRule(obj *unstructured.Unstructured, rule workv1.FeedbackRule) ([]workv1.FeedbackValue, error) {
	if rule.Type != workv1.JSONPathsType {
		return r.agent.GetValuesByRule(obj, rule)
	}
	var values []workv1.FeedbackValue
	var errs []error
	for _, path := range rule.JsonPaths {
		if len(path.Version) != 0 && obj.GroupVersionKind().Version != path.Version {
			errs = append(errs, fmt.Errorf("version set in the path %s is not matched for the related resource", path.Name))
			continue
		}
		fields := r.fields(path.Path)
		if fields == nil {
			v, err := r.agent.GetValuesByRule(obj, workv1.FeedbackRule{Type: workv1.JSONPathsType, JsonPaths: []workv1.JsonPath{path}})
			if err != nil {
				errs = append(errs, err)
			}
			values = append(values, v...)
			continue
		}
		value, err := r.value(path.Name, fields, obj.Object)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if value != nil {
			values = append(values, *value)
		}
	}
	return values, utilerrors.NewAggregate(errs)
}

// value is getValueByJsonPath of the agent's reader for a simple path: a missing field or a value that is not
// an object on the way gives nothing, as JSONPath with missing keys allowed does.
func (r *feedbackReader) value(name string, fields []string, obj map[string]any) (*workv1.FeedbackValue, error) {
	var v any = obj
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		if v, ok = m[f]; !ok {
			return nil, nil
		}
	}
	switch t := v.(type) {
	case nil:
		return nil, nil
	case int64:
		return &workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.Integer, Integer: &t}}, nil
	case string:
		return &workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.String, String: &t}}, nil
	case bool:
		return &workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.Boolean, Boolean: &t}}, nil
	}
	if !features.SpokeMutableFeatureGate.Enabled(ocmfeature.RawFeedbackJsonString) {
		return nil, fmt.Errorf("the type %T of the value for %s is not found", v, name)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the resource to json string for name %s: %v", name, err)
	}
	if len(raw) > r.maxRaw {
		return nil, fmt.Errorf("the length of returned json raw string for name %s is larger than the maximum length %d", name, r.maxRaw)
	}
	s := string(raw)
	return &workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.JsonRaw, JsonRaw: &s}}, nil
}
