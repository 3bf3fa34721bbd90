package appsetreport

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// memos keeps, per ApplicationSet, what the last evaluation of its report observed, so that the next one
// observes again only the Applications that changed (by resourceVersion) and keeps the union of their resources
// up to date by counting, instead of parsing and sorting the resources of every Application each time. An
// ApplicationSet is evaluated by one worker at a time; the lock guards the map only.
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

// memo is what the evaluations of one ApplicationSet's report keep: about 300 bytes per Application, and about
// 120 more per resource it deploys that no other Application of the ApplicationSet deploys.
type memo struct {
	// apps are by name: an ApplicationSet's Applications are all in its namespace.
	apps map[string]*memoApp
	// pass numbers the evaluations; an Application not seen in the current one is gone.
	pass uint64
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
	return &memo{apps: map[string]*memoApp{}, refs: map[string]int32{}, beyondCache: map[int]int{}}
}

type memoApp struct {
	resourceVersion string
	observed        Observed
	pass            uint64
}

// observe brings the memo in step with the ApplicationSet's pull-model Applications and returns their states.
func (m *memo) observe(apps []*argocd.Application) []Observed {
	m.pass++
	out := make([]Observed, 0, len(apps))
	for _, app := range apps {
		key := app.Name
		e := m.apps[key]
		if e == nil || e.resourceVersion != app.ResourceVersion {
			if !argocd.IsPullApplication(app) {
				if e != nil {
					m.remove(key, e)
				}
				continue
			}
			o := Observe(app)
			if e == nil {
				e = &memoApp{}
				m.apps[key] = e
				m.countRefs(&o, 1)
			} else if e.observed.ResourceRefs != o.ResourceRefs || e.observed.ResourceCount != o.ResourceCount {
				m.countRefs(&e.observed, -1)
				m.countRefs(&o, 1)
			}
			e.resourceVersion, e.observed = app.ResourceVersion, o
		}
		e.pass = m.pass
		out = append(out, e.observed)
	}
	for key, e := range m.apps {
		if e.pass != m.pass {
			m.remove(key, e)
		}
	}
	return out
}

func (m *memo) remove(key string, e *memoApp) {
	m.countRefs(&e.observed, -1)
	delete(m.apps, key)
}

// countRefs adds (delta 1) or takes away (delta -1) an Application's resources from the counts.
func (m *memo) countRefs(o *Observed, delta int32) {
	count := 0
	for line := range strings.SplitSeq(o.ResourceRefs, "\n") {
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
	beyond := o.ResourceCount - count
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
