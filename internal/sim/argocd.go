package sim

import (
	"crypto/sha1" //nolint:gosec // a fake commit SHA, not a security hash
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// This file is the simulated local Argo CD: a state machine per Application that stands in for Argo CD's
// application controller at scale. It is not Argo CD; the tests and the demo run the real one.

// Sync statuses of Argo CD.
const (
	SyncSynced    = "Synced"
	SyncOutOfSync = "OutOfSync"
	SyncUnknown   = "Unknown"
)

// Health statuses of Argo CD.
const (
	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"
	HealthMissing     = "Missing"
)

// Operation phases of Argo CD.
const (
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseError     = "Error"
)

// Messages the simulated Argo CD writes, as Argo CD (gitops-engine) words them.
const (
	messageRunning   = "one or more tasks are running"
	messageSucceeded = "successfully synced (all tasks run)"
	// comparisonErrorMessage is the ComparisonError Argo CD v3 shows for a repository it cannot read.
	comparisonErrorMessage = "Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: " +
		"code = Unknown desc = failed to list refs: repository not found"
	conditionComparisonError = "ComparisonError"
	// historyLimit is Argo CD's default revisionHistoryLimit.
	historyLimit = 10
	// controllerNamespace is where the simulated Argo CD says it runs.
	controllerNamespace = "argocd"
)

// sync and health are kept as small codes; the strings above are what the status shows.
type syncCode uint8

const (
	syncOutOfSync syncCode = iota
	syncSynced
	syncUnknown
)

func (s syncCode) String() string {
	switch s {
	case syncSynced:
		return SyncSynced
	case syncUnknown:
		return SyncUnknown
	default:
		return SyncOutOfSync
	}
}

type healthCode uint8

const (
	healthMissing healthCode = iota
	healthProgressing
	healthHealthy
	healthDegraded
)

func (h healthCode) String() string {
	switch h {
	case healthProgressing:
		return HealthProgressing
	case healthHealthy:
		return HealthHealthy
	case healthDegraded:
		return HealthDegraded
	default:
		return HealthMissing
	}
}

// ArgoConfig is how the simulated Argo CD behaves.
type ArgoConfig struct {
	// SyncDelay is how long a sync takes: an applied Application is OutOfSync/Progressing with a running
	// operation for this long, then Synced/Healthy.
	SyncDelay time.Duration
	// SyncJitter spreads SyncDelay by up to ± this fraction (0 to 1).
	SyncJitter float64
	// InvalidRepo matches the repoURLs that the simulated Argo CD cannot read (nil: none).
	InvalidRepo *regexp.Regexp
	// ResourcesPerApp is how many resources each Application deploys (in its status; nothing is created).
	ResourcesPerApp int
}

// manifestApp is what the simulated Argo CD reads from a delivered Application manifest.
type manifestApp struct {
	name, namespace string
	hash            uint64
	source          []byte // canonical JSON of spec.source (sorted keys)
	destination     []byte // canonical JSON of spec.destination
	repoURL         string
	chart           bool
	targetRevision  string
	prune           bool
	operation       []byte // canonical JSON of .operation, nil without one
	opUser          string
	opAutomated     bool
	opRevision      string
}

// parseApplication reads an Application manifest. Its hash covers the whole manifest: as the work agent's
// server-side apply, a manifest that changed in any way is applied again, .operation included.
func parseApplication(raw []byte) (*manifestApp, error) {
	var obj struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Source      map[string]any `json:"source"`
			Sources     []any          `json:"sources"`
			Destination map[string]any `json:"destination"`
			SyncPolicy  struct {
				Automated *struct {
					Prune bool `json:"prune"`
				} `json:"automated"`
			} `json:"syncPolicy"`
		} `json:"spec"`
		Operation map[string]any `json:"operation"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode application: %w", err)
	}
	if obj.Metadata.Name == "" {
		return nil, errors.New("the application has no name")
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	m := &manifestApp{name: obj.Metadata.Name, namespace: obj.Metadata.Namespace, hash: h.Sum64()}
	src := obj.Spec.Source
	if src == nil && len(obj.Spec.Sources) > 0 {
		src, _ = obj.Spec.Sources[0].(map[string]any)
	}
	if src == nil {
		src = map[string]any{"repoURL": ""}
	}
	m.repoURL, _ = src["repoURL"].(string)
	m.targetRevision, _ = src["targetRevision"].(string)
	chart, _ := src["chart"].(string)
	m.chart = chart != ""
	if obj.Spec.Destination == nil {
		obj.Spec.Destination = map[string]any{}
	}
	var err error
	if m.source, err = json.Marshal(src); err != nil {
		return nil, fmt.Errorf("encode source: %w", err)
	}
	if m.destination, err = json.Marshal(obj.Spec.Destination); err != nil {
		return nil, fmt.Errorf("encode destination: %w", err)
	}
	if obj.Spec.SyncPolicy.Automated != nil {
		m.prune = obj.Spec.SyncPolicy.Automated.Prune
	}
	if obj.Operation != nil {
		if m.operation, err = json.Marshal(obj.Operation); err != nil {
			return nil, fmt.Errorf("encode operation: %w", err)
		}
		if by, ok := obj.Operation["initiatedBy"].(map[string]any); ok {
			m.opUser, _ = by["username"].(string)
			m.opAutomated, _ = by["automated"].(bool)
		}
		if s, ok := obj.Operation["sync"].(map[string]any); ok {
			m.opRevision, _ = s["revision"].(string)
		}
	}
	return m, nil
}

var commitSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// revision is the commit (or chart version) the simulated Argo CD resolves a source to: the target revision
// when it is already a commit SHA or a chart version, else a stable fake SHA of the source.
func (m *manifestApp) revision() string {
	if commitSHA.MatchString(m.targetRevision) || (m.chart && m.targetRevision != "") {
		return m.targetRevision
	}
	sum := sha1.Sum(m.source) //nolint:gosec // a fake commit SHA
	return hex.EncodeToString(sum[:])
}

// operation is an Argo CD operation on an Application and its state.
type operation struct {
	raw        []byte // the requested .operation (canonical JSON); nil for an automated sync
	user       string
	automated  bool
	phase      string
	message    string
	revision   string
	startedAt  int64 // unix seconds, as Argo CD's timestamps
	finishedAt int64
}

// deployment is one entry of the Application's history.
type deployment struct {
	id         int64
	revision   string
	startedAt  int64
	deployedAt int64
	user       string
	automated  bool
}

// app is one Application as the simulated Argo CD holds it: little more than what its status needs.
type app struct {
	name, namespace string
	hash            uint64
	source          []byte
	destination     []byte
	chart           bool
	prune           bool
	revision        string
	invalid         bool
	sync            syncCode
	health          healthCode
	healthSince     int64
	errorSince      int64
	// changedAt is when the status last changed (unix nanoseconds); status.reconciledAt shows it.
	changedAt int64
	op        *operation
	history   []deployment
	// due is when the running operation completes (unix nanoseconds; 0: nothing scheduled).
	due int64
}

// apply applies a delivered Application manifest at now. A new Application, or one whose source or
// destination changed, starts an automated sync that completes after delay; a repoURL that InvalidRepo
// matches gets sync status Unknown and a ComparisonError instead. A .operation in the manifest runs. It
// reports whether the status changed.
func (c *ArgoConfig) apply(a *app, m *manifestApp, now time.Time, delay time.Duration) bool {
	if a.hash == m.hash && a.name != "" {
		return false
	}
	changedTarget := a.name == "" || string(a.source) != string(m.source) || string(a.destination) != string(m.destination)
	a.name, a.namespace, a.hash = m.name, m.namespace, m.hash
	a.source, a.destination, a.chart, a.prune = m.source, m.destination, m.chart, m.prune
	a.changedAt = now.UnixNano()
	invalid := c.InvalidRepo != nil && c.InvalidRepo.MatchString(m.repoURL)
	switch {
	case invalid:
		if !a.invalid {
			a.errorSince = now.Unix()
		}
		a.invalid = true
		a.revision = ""
		a.sync = syncUnknown
		a.setHealth(healthHealthy, now)
		if a.op != nil && a.op.phase == PhaseRunning {
			a.op = nil
			a.due = 0
		}
	case changedTarget || a.invalid:
		a.invalid = false
		a.revision = m.revision()
		a.startSync(&operation{automated: true, revision: a.revision}, now, delay)
	}
	if m.operation != nil {
		a.requestOperation(m, now, delay)
	}
	return true
}

// requestOperation runs the .operation of a manifest, as Argo CD does with an Application's .operation (and
// then removes it from the Application: the simulator never keeps it).
func (a *app) requestOperation(m *manifestApp, now time.Time, delay time.Duration) {
	op := &operation{raw: m.operation, user: m.opUser, automated: m.opAutomated, revision: a.revision}
	if commitSHA.MatchString(m.opRevision) {
		op.revision = m.opRevision
	}
	if a.invalid {
		op.phase = PhaseError
		op.message = conditionComparisonError + ": " + comparisonErrorMessage
		op.startedAt, op.finishedAt = now.Unix(), now.Unix()
		a.op = op
		a.due = 0
		return
	}
	a.startSync(op, now, delay)
}

// startSync starts a sync operation: OutOfSync/Progressing until it completes after delay.
func (a *app) startSync(op *operation, now time.Time, delay time.Duration) {
	op.phase, op.message, op.startedAt = PhaseRunning, messageRunning, now.Unix()
	a.op = op
	a.sync = syncOutOfSync
	a.setHealth(healthProgressing, now)
	a.due = now.Add(delay).UnixNano()
}

// advance completes the running operation when it is due. It reports whether the status changed.
func (a *app) advance(now time.Time) bool {
	if a.due == 0 || now.UnixNano() < a.due || a.op == nil || a.op.phase != PhaseRunning {
		return false
	}
	// The sync completed when it was due; the status shows it from then.
	a.changedAt = a.due
	a.due = 0
	a.op.phase, a.op.message, a.op.finishedAt = PhaseSucceeded, messageSucceeded, now.Unix()
	a.sync = syncSynced
	a.setHealth(healthHealthy, now)
	id := int64(0)
	if n := len(a.history); n > 0 {
		id = a.history[n-1].id + 1
	}
	a.history = append(a.history, deployment{id: id, revision: a.op.revision, startedAt: a.op.startedAt,
		deployedAt: now.Unix(), user: a.op.user, automated: a.op.automated})
	if len(a.history) > historyLimit {
		a.history = append(a.history[:0:0], a.history[len(a.history)-historyLimit:]...)
	}
	return true
}

// settled reports whether the Application is neither syncing nor failing to compare: churn only touches those.
func (a *app) settled() bool {
	return !a.invalid && (a.op == nil || a.op.phase != PhaseRunning)
}

// flip changes a settled Application's health (Healthy ↔ Degraded) or, with sync set, its sync status
// (Synced ↔ OutOfSync), as drift on the cluster would.
func (a *app) flip(sync bool, now time.Time) {
	a.changedAt = now.UnixNano()
	if sync {
		if a.sync == syncSynced {
			a.sync = syncOutOfSync
		} else {
			a.sync = syncSynced
		}
		return
	}
	if a.health == healthHealthy {
		a.setHealth(healthDegraded, now)
	} else {
		a.setHealth(healthHealthy, now)
	}
}

func (a *app) setHealth(h healthCode, now time.Time) {
	if a.health != h || a.healthSince == 0 {
		a.healthSince = now.Unix()
	}
	a.health = h
}

// resource is one resource an Application deploys in the simulation.
type resource struct {
	group, version, kind string
}

var resourceKinds = []resource{
	{"", "v1", "ConfigMap"},
	{"apps", "v1", "Deployment"},
	{"", "v1", "Service"},
	{"", "v1", "ServiceAccount"},
	{"", "v1", "Secret"},
}

// resourceName names the i-th resource of an Application.
func resourceName(app string, i int) string {
	if i < len(resourceKinds) {
		return app
	}
	return fmt.Sprintf("%s-%d", app, i/len(resourceKinds))
}

// syncMessage is gitops-engine's message for a resource that a sync applied, e.g. "deployment.apps/x created".
func syncMessage(r resource, name string, created bool) string {
	kind := strings.ToLower(r.kind)
	if r.group != "" {
		kind += "." + r.group
	}
	if created {
		return kind + "/" + name + " created"
	}
	return kind + "/" + name + " unchanged"
}

// destinationNamespace is where an Application's resources go.
func destinationNamespace(dest []byte) string {
	var d struct {
		Namespace string `json:"namespace"`
	}
	_ = json.Unmarshal(dest, &d)
	if d.Namespace == "" {
		return "default"
	}
	return d.Namespace
}

// applicationGroupKind reports whether a manifest's apiVersion and kind are an Argo CD Application.
func applicationGroupKind(apiVersion, kind string) bool {
	return kind == argocd.ApplicationGVK.Kind && strings.HasPrefix(apiVersion, argocd.Group+"/")
}
