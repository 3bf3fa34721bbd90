package sim

import (
	"encoding/json"
	"time"
)

// SyncedStatus is the .status the simulated Argo CD reports for a delivered Application manifest once its
// first sync has succeeded at now: what the hub shows for that Application when the fleet is at rest. The
// benchmark's floor writes it, so that the floor measures the hub apiserver with the fleet's own statuses.
func (c *ArgoConfig) SyncedStatus(manifest []byte, now time.Time) (map[string]any, error) {
	m, err := parseApplication(manifest)
	if err != nil {
		return nil, err
	}
	a := &app{}
	c.apply(a, m, now, 0)
	a.advance(now)
	return c.status(a), nil
}

// status returns the Application's .status as Argo CD v3 writes it, as an unstructured value (int64 numbers,
// as the API server returns them): the sections the feedback rules read, plus reconciledAt, which they leave
// out.
func (c *ArgoConfig) status(a *app) map[string]any {
	source := decodeObject(a.source)
	st := map[string]any{
		"sync": c.syncSection(a, source),
		"health": map[string]any{
			"status":             a.health.String(),
			"lastTransitionTime": timestamp(a.healthSince),
		},
		"summary":              c.summary(a),
		"sourceHydrator":       map[string]any{},
		"resourceHealthSource": "appTree",
		"controllerNamespace":  controllerNamespace,
		"reconciledAt":         timestamp(a.changedAt / int64(time.Second)),
	}
	if a.invalid {
		st["conditions"] = []any{map[string]any{
			"type":               conditionComparisonError,
			"message":            comparisonErrorMessage,
			"lastTransitionTime": timestamp(a.errorSince),
		}}
	} else {
		st["resources"] = c.resources(a)
		st["sourceType"] = "Directory"
		if a.chart {
			st["sourceType"] = "Helm"
		}
	}
	if a.op != nil {
		st["operationState"] = c.operationState(a, source)
	}
	if len(a.history) > 0 {
		history := make([]any, 0, len(a.history))
		for _, d := range a.history {
			history = append(history, map[string]any{
				"id":              d.id,
				"revision":        d.revision,
				"deployStartedAt": timestamp(d.startedAt),
				"deployedAt":      timestamp(d.deployedAt),
				"source":          source,
				"initiatedBy":     initiator(d.user, d.automated),
			})
		}
		st["history"] = history
	}
	return st
}

func (c *ArgoConfig) syncSection(a *app, source map[string]any) map[string]any {
	sync := map[string]any{
		"status": a.sync.String(),
		"comparedTo": map[string]any{
			"source":      source,
			"destination": decodeObject(a.destination),
		},
	}
	if a.revision != "" {
		sync["revision"] = a.revision
	}
	return sync
}

// resources is status.resources. Argo CD v3 keeps resource health in the resource tree (resourceHealthSource
// appTree), so the entries carry no health.
func (c *ArgoConfig) resources(a *app) []any {
	ns := destinationNamespace(a.destination)
	status := SyncSynced
	if a.sync != syncSynced {
		status = SyncOutOfSync
	}
	out := make([]any, 0, c.ResourcesPerApp)
	for i := range c.ResourcesPerApp {
		r := resourceKinds[i%len(resourceKinds)]
		e := map[string]any{"version": r.version, "kind": r.kind, "namespace": ns, "name": resourceName(a.name, i), "status": status}
		if r.group != "" {
			e["group"] = r.group
		}
		out = append(out, e)
	}
	return out
}

func (c *ArgoConfig) summary(a *app) map[string]any {
	if a.invalid || c.ResourcesPerApp < 2 {
		return map[string]any{}
	}
	return map[string]any{"images": []any{"quay.io/argoprojlabs/argocd-e2e-container:0.2"}}
}

func (c *ArgoConfig) operationState(a *app, source map[string]any) map[string]any {
	op := a.op
	var requested map[string]any
	if op.raw != nil {
		// Argo CD copies .operation through its types: initiatedBy and retry are always there.
		requested = decodeObject(op.raw)
		for _, k := range []string{"initiatedBy", "retry"} {
			if _, ok := requested[k]; !ok {
				requested[k] = map[string]any{}
			}
		}
	} else {
		sync := map[string]any{"revision": op.revision, "source": source}
		if a.prune {
			sync["prune"] = true
		}
		requested = map[string]any{
			"sync":        sync,
			"initiatedBy": initiator(op.user, op.automated),
			"retry":       map[string]any{"limit": int64(5)},
		}
	}
	st := map[string]any{
		"operation": requested,
		"phase":     op.phase,
		"startedAt": timestamp(op.startedAt),
	}
	if op.message != "" {
		st["message"] = op.message
	}
	if op.finishedAt != 0 {
		st["finishedAt"] = timestamp(op.finishedAt)
	}
	if op.phase == PhaseError {
		return st
	}
	result := map[string]any{"revision": op.revision, "source": source}
	if op.phase == PhaseSucceeded {
		ns := destinationNamespace(a.destination)
		created := len(a.history) <= 1
		resources := make([]any, 0, c.ResourcesPerApp)
		for i := range c.ResourcesPerApp {
			r := resourceKinds[i%len(resourceKinds)]
			name := resourceName(a.name, i)
			resources = append(resources, map[string]any{
				"group": r.group, "version": r.version, "kind": r.kind, "namespace": ns, "name": name,
				"status": "Synced", "message": syncMessage(r, name, created), "hookPhase": PhaseRunning, "syncPhase": "Sync",
			})
		}
		result["resources"] = resources
	}
	st["syncResult"] = result
	return st
}

func initiator(user string, automated bool) map[string]any {
	by := map[string]any{}
	if user != "" {
		by["username"] = user
	}
	if automated {
		by["automated"] = true
	}
	return by
}

// decodeObject decodes canonical JSON that the simulator encoded itself.
func decodeObject(data []byte) map[string]any {
	out := map[string]any{}
	_ = json.Unmarshal(data, &out)
	return out
}

// timestamp formats unix seconds as Kubernetes and Argo CD do.
func timestamp(sec int64) string {
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}
