package argocd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Application is the hub controllers' thin view of an Argo CD Application: typed metadata, the spec and the
// operation as raw JSON (decoded only when a work is built), and the status, which the controllers' cache
// replaces by a Summary. A cached Application costs a fraction of a decoded unstructured one: at 150,000
// Applications that is the difference between a controller that fits in 1 GiB and one that does not.
type Application struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec,omitempty"`
	Operation         json.RawMessage `json:"operation,omitempty"`
	// Status is the status as the apiserver sent it; Compact turns it into Summary.
	Status json.RawMessage `json:"status,omitempty"`
	// Summary is what the controllers read of the status (not serialized).
	Summary *StatusSummary `json:"-"`
}

// ApplicationList is a list of Applications.
type ApplicationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Application `json:"items"`
}

// StatusSummary is what the hub controllers read of an Application's status.
type StatusSummary struct {
	// Hash is the hash of the whole status (StatusHash), to tell whether a status is already on the hub.
	Hash                                                                      string
	Sync, Revision, Health, HealthMessage                                     string
	OperationPhase, OperationStartedAt, OperationFinishedAt, OperationMessage string
	// ReconciledAt is the status's reconciledAt, as the hub controller wrote it.
	ReconciledAt string
	Conditions   []Condition
	// Resources identify the resources the Application deploys (see ResourceRefs), at most MaxResources of
	// them; ResourceCount is their number.
	Resources     string
	ResourceCount int
}

// Condition is an entry of an Application's status.conditions.
type Condition struct {
	Type               string `json:"type"`
	Message            string `json:"message"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// StatusReconciledAt is the status field with the time of the Application's last reconciliation. The hub
// controller sets it when it writes a status (appstatus.WithReconciledAt). StatusHash keeps one bit of it: whether
// it is before the end of the operation the status shows, that is, whether the hub still waits for the managed
// cluster's comparison after that operation. Otherwise a status that differs from the hub's in reconciledAt alone
// is already on the hub.
const StatusReconciledAt = "reconciledAt"

// reconciledPending stands for a reconciledAt before the operation's end in what StatusHash hashes.
const reconciledPending = "before the operation's end"

// StatusHash hashes an Application status as its canonical JSON (what encoding/json writes, and what the
// apiserver sends back for a custom resource), so a status already on the hub is recognised. Of reconciledAt
// only whether it is before the operation's end counts.
func StatusHash(status map[string]any) (string, error) {
	if at, ok := status[StatusReconciledAt]; ok {
		without := make(map[string]any, len(status))
		for k, v := range status {
			if k != StatusReconciledAt {
				without[k] = v
			}
		}
		if s, _ := at.(string); ReconciledBeforeEnd(s, operationFinishedAt(status)) {
			without[StatusReconciledAt] = reconciledPending
		}
		status = without
	}
	if status == nil {
		status = map[string]any{}
	}
	h, _, err := HashJSON(status)
	if err != nil {
		return "", fmt.Errorf("encode application status: %w", err)
	}
	return h, nil
}

// ReconciledBeforeEnd reports whether reconciledAt is before finishedAt, the end of an operation; false when
// either is missing or not an RFC 3339 time.
func ReconciledBeforeEnd(reconciledAt, finishedAt string) bool {
	at, err1 := time.Parse(time.RFC3339, reconciledAt)
	end, err2 := time.Parse(time.RFC3339, finishedAt)
	return err1 == nil && err2 == nil && at.Before(end)
}

func operationFinishedAt(status map[string]any) string {
	state, _ := status["operationState"].(map[string]any)
	finished, _ := state["finishedAt"].(string)
	return finished
}

// rawStatusHash is StatusHash of a status as the apiserver encoded it.
func rawStatusHash(raw []byte) (string, error) {
	if !bytes.Contains(raw, []byte(`"`+StatusReconciledAt+`"`)) {
		return hashBytes(raw), nil
	}
	// Only the top level is decoded; the other fields keep their encoding, which is already canonical.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", err
	}
	var at string
	var state struct {
		FinishedAt string `json:"finishedAt"`
	}
	_ = json.Unmarshal(fields[StatusReconciledAt], &at)
	_ = json.Unmarshal(fields["operationState"], &state)
	delete(fields, StatusReconciledAt)
	if ReconciledBeforeEnd(at, state.FinishedAt) {
		pending, _ := json.Marshal(reconciledPending)
		fields[StatusReconciledAt] = pending
	}
	h, _, err := HashJSON(fields)
	return h, err
}

// emptyStatusHash is the hash of an absent status.
var emptyStatusHash, _ = StatusHash(nil)

// statusFields is the part of a status Compact decodes.
type statusFields struct {
	Sync struct {
		Status   string `json:"status"`
		Revision string `json:"revision"`
	} `json:"sync"`
	Health struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"health"`
	OperationState struct {
		Phase      string `json:"phase"`
		StartedAt  string `json:"startedAt"`
		FinishedAt string `json:"finishedAt"`
		Message    string `json:"message"`
	} `json:"operationState"`
	ReconciledAt string        `json:"reconciledAt"`
	Conditions   []Condition   `json:"conditions"`
	Resources    []ResourceRef `json:"resources"`
}

// Compact replaces the raw status by its Summary. The raw status bytes are the apiserver's encoding of the
// status, so their hash equals StatusHash of the same status built elsewhere. An Application compacted already
// (a Summary and no raw status) stays as it is: informers apply their transform to a list twice (pagedlist).
func (a *Application) Compact() error {
	if a.Summary != nil && len(a.Status) == 0 {
		return nil
	}
	s := &StatusSummary{Hash: emptyStatusHash}
	if len(a.Status) > 0 && string(a.Status) != "null" {
		var f statusFields
		if err := json.Unmarshal(a.Status, &f); err != nil {
			return fmt.Errorf("decode status of application %s/%s: %w", a.Namespace, a.Name, err)
		}
		var err error
		if s.Hash, err = rawStatusHash(a.Status); err != nil {
			return fmt.Errorf("decode status of application %s/%s: %w", a.Namespace, a.Name, err)
		}
		s.Sync, s.Revision = interned.intern(f.Sync.Status), InternShort(f.Sync.Revision)
		s.Health, s.HealthMessage = interned.intern(f.Health.Status), f.Health.Message
		s.OperationPhase, s.OperationStartedAt = interned.intern(f.OperationState.Phase), f.OperationState.StartedAt
		s.OperationFinishedAt, s.OperationMessage = f.OperationState.FinishedAt, f.OperationState.Message
		s.ReconciledAt = f.ReconciledAt
		s.Conditions = f.Conditions
		s.Resources, s.ResourceCount = EncodeResourceRefs(f.Resources)
	}
	a.Summary, a.Status = s, nil
	return nil
}

// StatusSummary returns the Summary, computing it when the Application did not come through Compact.
func (a *Application) StatusSummary() *StatusSummary {
	if a.Summary == nil {
		c := a.DeepCopy()
		if err := c.Compact(); err != nil {
			return &StatusSummary{}
		}
		a.Summary = c.Summary
	}
	return a.Summary
}

// HasOperation reports whether the Application has an operation.
func (a *Application) HasOperation() bool {
	return len(a.Operation) > 0 && string(a.Operation) != "null"
}

// OperationValue returns the operation decoded.
func (a *Application) OperationValue() (any, error) {
	var op any
	if !a.HasOperation() {
		return nil, nil
	}
	if err := json.Unmarshal(a.Operation, &op); err != nil {
		return nil, fmt.Errorf("decode operation of application %s/%s: %w", a.Namespace, a.Name, err)
	}
	return op, nil
}

// Project returns the project of the Application ("default" when not set).
func (a *Application) Project() string {
	var spec struct {
		Project string `json:"project"`
	}
	_ = json.Unmarshal(a.Spec, &spec)
	if spec.Project == "" {
		return DefaultProject
	}
	return spec.Project
}

// Unstructured returns the Application without its status as an unstructured object, for the work builder.
func (a *Application) Unstructured() (*unstructured.Unstructured, error) {
	// Encoded from a shallow copy: nothing is written to it, and the decoding below is the deep copy.
	c := *a
	c.Status, c.Summary = nil, nil
	c.SetGroupVersionKind(ApplicationGVK)
	data, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode application %s/%s: %w", a.Namespace, a.Name, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decode application %s/%s: %w", a.Namespace, a.Name, err)
	}
	return u, nil
}

// ResourceRef identifies a resource an Application deploys, as status.resources names it.
type ResourceRef struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// MaxResources is the number of resources of one Application a Summary keeps.
const MaxResources = 100

// EncodeResourceRefs encodes the first MaxResources resource identities as one interned string (a list of
// structs would cost more than the rest of a cached Application), and returns it with their number.
func EncodeResourceRefs(refs []ResourceRef) (string, int) {
	if len(refs) == 0 {
		return "", 0
	}
	// Sized first, the string is one allocation of its length: the interned string keeps its whole buffer.
	size, count := -1, 0
	for _, r := range refs {
		if r.Kind != "" && r.Name != "" {
			if count++; count <= MaxResources {
				size += len(r.Group) + len(r.Version) + len(r.Kind) + len(r.Namespace) + len(r.Name) + 5
			}
		}
	}
	if count == 0 {
		return "", 0
	}
	var b strings.Builder
	b.Grow(size)
	written := 0
	for _, r := range refs {
		if r.Kind == "" || r.Name == "" {
			continue
		}
		if written++; written > MaxResources {
			break
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		for i, f := range [...]string{r.Group, r.Version, r.Kind, r.Namespace, r.Name} {
			if i > 0 {
				b.WriteByte('/')
			}
			b.WriteString(f)
		}
	}
	return interned.intern(b.String()), count
}

// ParseResourceRefs decodes EncodeResourceRefs.
func ParseResourceRefs(s string) []ResourceRef {
	if s == "" {
		return nil
	}
	var out []ResourceRef
	for line := range strings.SplitSeq(s, "\n") {
		if r, ok := ParseResourceRef(line); ok {
			out = append(out, r)
		}
	}
	return out
}

// ParseResourceRef decodes one line of EncodeResourceRefs; false for a line that is not a resource. It
// allocates nothing: the ApplicationSet reports parse every line of their Applications' resources (strings.SplitN
// here was 3 % of what the controller allocated at 150,000 Applications).
func ParseResourceRef(line string) (ResourceRef, bool) {
	var r ResourceRef
	rest := line
	for _, f := range []*string{&r.Group, &r.Version, &r.Kind, &r.Namespace} {
		var ok bool
		if *f, rest, ok = strings.Cut(rest, "/"); !ok {
			return ResourceRef{}, false
		}
	}
	r.Name = rest
	return r, true
}

// DeepCopyInto copies the Application.
func (a *Application) DeepCopyInto(out *Application) {
	*out = *a
	out.TypeMeta = a.TypeMeta
	a.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = copyRaw(a.Spec)
	out.Operation = copyRaw(a.Operation)
	out.Status = copyRaw(a.Status)
	if a.Summary != nil {
		s := *a.Summary
		s.Conditions = append([]Condition(nil), a.Summary.Conditions...)
		out.Summary = &s
	}
}

// DeepCopy copies the Application.
func (a *Application) DeepCopy() *Application {
	if a == nil {
		return nil
	}
	out := &Application{}
	a.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies the Application.
func (a *Application) DeepCopyObject() runtime.Object { return a.DeepCopy() }

// DeepCopyObject copies the list.
func (l *ApplicationList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ApplicationList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Application, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

func copyRaw(r json.RawMessage) json.RawMessage {
	if r == nil {
		return nil
	}
	return append(json.RawMessage(nil), r...)
}

// AddToScheme registers Application and ApplicationList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(ApplicationGVK, &Application{})
	s.AddKnownTypeWithName(ApplicationGVK.GroupVersion().WithKind("ApplicationList"), &ApplicationList{})
	metav1.AddToGroupVersion(s, ApplicationGVK.GroupVersion())
	return nil
}

// ApplicationFromUnstructured converts an unstructured Application (from a dynamic client).
func ApplicationFromUnstructured(u *unstructured.Unstructured) (*Application, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode application %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	a := &Application{}
	if err := json.Unmarshal(data, a); err != nil {
		return nil, fmt.Errorf("decode application %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return a, nil
}
