package appsetreport

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// memos keeps, per ApplicationSet, the resources its report's last evaluation counted for each Application, so
// that the next one keeps the union of their resources up to date by counting the Applications whose resources
// changed, instead of parsing and sorting the resources of every Application each time. An ApplicationSet is
// evaluated by one worker at a time; the lock guards the map only.
type memos struct {
	mu     sync.Mutex
	byKeys map[types.NamespacedName]*memo
}

func (m *memos) get(key types.NamespacedName) *memo {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byKeys == nil {
		m.byKeys = map[types.NamespacedName]*memo{}
	}
	if m.byKeys[key] == nil {
		m.byKeys[key] = newMemo()
	}
	return m.byKeys[key]
}

func (m *memos) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byKeys, key)
}

// memo is what the evaluations of one ApplicationSet's report keep: about 70 bytes per Application, and about
// 120 more per resource it deploys that no other Application of the ApplicationSet deploys. An Application's
// state is observed again at each evaluation from the cache's status summary rather than kept: kept, it made
// the memo about 270 bytes per Application (40 MB of the controller's live heap at 150,000, 10 MB without).
type memo struct {
	// apps are by name: an ApplicationSet's Applications are all in its namespace.
	apps map[string]memoApp
	// refs counts the Applications that deploy each resource, by its line in the Applications' ResourceRefs
	// (argocd.EncodeResourceRefs; the cache interns them); beyondCache counts the Applications by how many of
	// their resources the cache did not keep.
	refs        map[string]int32
	beyondCache map[int]int
	// sorted are the first resources of refs in the report's order, and omitted the number of the others;
	// refsChanged tells that the set changed since.
	sorted      []v1alpha1.ResourceRef
	omitted     int32
	refsChanged bool
}

func newMemo() *memo {
	return &memo{apps: map[string]memoApp{}, refs: map[string]int32{}, beyondCache: map[int]int{}}
}

// memoApp is an Application's resources as refs counts them (Observed.ResourceRefs and ResourceCount).
type memoApp struct {
	resourceRefs  string
	resourceCount int
}

// observe brings the memo in step with the ApplicationSet's pull-model Applications and returns their states.
func (m *memo) observe(apps []*argocd.Application) []Observed {
	out := make([]Observed, 0, len(apps))
	for _, app := range apps {
		if !argocd.IsPullApplication(app) {
			continue
		}
		o := Observe(app)
		e, ok := m.apps[app.Name]
		if !ok || e.resourceRefs != o.ResourceRefs || e.resourceCount != o.ResourceCount {
			if ok {
				m.countRefs(e.resourceRefs, e.resourceCount, -1)
			}
			m.countRefs(o.ResourceRefs, o.ResourceCount, 1)
			m.apps[app.Name] = memoApp{resourceRefs: o.ResourceRefs, resourceCount: o.ResourceCount}
		}
		out = append(out, o)
	}
	if len(m.apps) > len(out) {
		// Some are gone (or no longer pull-model Applications).
		seen := make(map[string]bool, len(out))
		for _, o := range out {
			seen[o.Name] = true
		}
		for name, e := range m.apps {
			if !seen[name] {
				m.countRefs(e.resourceRefs, e.resourceCount, -1)
				delete(m.apps, name)
			}
		}
	}
	return out
}

// countRefs adds (delta 1) or takes away (delta -1) an Application's resources (Observed.ResourceRefs and
// ResourceCount) from the counts.
func (m *memo) countRefs(resourceRefs string, resourceCount int, delta int32) {
	count := 0
	for line := range strings.SplitSeq(resourceRefs, "\n") {
		if _, ok := argocd.ParseResourceRef(line); !ok {
			continue
		}
		count++
		n := m.refs[line] + delta
		if n > 0 {
			m.refs[line] = n
		} else {
			delete(m.refs, line)
		}
		// The set of resources changes when one comes or goes.
		m.refsChanged = m.refsChanged || n == 0 || (delta > 0 && n == delta)
	}
	if count == 0 {
		return
	}
	beyond := resourceCount - count
	if n := m.beyondCache[beyond] + int(delta); n > 0 {
		m.beyondCache[beyond] = n
	} else {
		delete(m.beyondCache, beyond)
	}
}

// resources returns the report's resources and how many were left out, as resources does for the same
// Applications; it sorts them again only when the set changed.
func (m *memo) resources(maxResources int) ([]v1alpha1.ResourceRef, int32) {
	if m.refsChanged {
		refs := make([]v1alpha1.ResourceRef, 0, len(m.refs))
		for line := range m.refs {
			r, _ := argocd.ParseResourceRef(line) // counted only when it parsed
			refs = append(refs, reportRef(r))
		}
		m.sorted, m.omitted = sortRefs(refs, maxResources)
		m.refsChanged = false
	}
	beyond := 0
	for b := range m.beyondCache {
		beyond = max(beyond, b)
	}
	return m.sorted, m.omitted + int32(beyond)
}
