package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// appView is what the tracker keeps of a hub Application.
type appView struct {
	sync, health string
}

// tracker watches the hub's pull-model Applications: how many exist and how many are Synced and Healthy, and
// when an expected status change shows up (status latency). It watches every Application and leaves the others
// out itself: without the hub apiserver's watch cache (the 150,000 runs), a watch with a label selector would cost
// the apiserver a second decode of every update, which the hub's own watchers do not need to pay for the
// benchmark's.
type tracker struct {
	mu      sync.Mutex
	apps    map[string]appView
	synced  int
	pending map[string]expectation
	latency []latencySample
	stop    chan struct{}
}

// expectation is a status change made on a simulated cluster that the hub should show.
type expectation struct {
	sync, health string
	// changedAt is when the status changed on the simulated cluster, sentAt when its agent had sent it.
	changedAt, sentAt time.Time
}

// latencySample is one status change's way to the hub: Total from the change on the cluster to the hub
// Application showing it, Hub the part of it after the cluster's agent had sent it.
type latencySample struct {
	ChangedAt  time.Time
	Total, Hub time.Duration
}

func startTracker(ctx context.Context, cfg *rest.Config) (*tracker, error) {
	t := &tracker{apps: map[string]appView{}, pending: map[string]expectation{}, stop: make(chan struct{})}
	// On a connection of its own: on the creating clients' one it would see the statuses late (hubmanager.OwnConnection).
	inf, err := testutil.ApplicationInformer(hubmanager.OwnConnection(cfg), hubmanager.Scheme(), labels.Everything())
	if err != nil {
		return nil, err
	}
	// Keep nothing but the name and the two statuses: the benchmark's own memory counts as the simulator's.
	if err := inf.SetTransform(func(obj any) (any, error) {
		app, ok := obj.(*argocd.Application)
		if !ok || app.Summary != nil {
			return obj, nil // slim already: the informer's paged lists transform twice
		}
		slim := &argocd.Application{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Name,
			ResourceVersion: app.ResourceVersion}}
		if !argocd.IsPullApplication(app) {
			return slim, nil // no Summary: not counted
		}
		if err := app.Compact(); err != nil {
			return nil, err
		}
		slim.Summary = &argocd.StatusSummary{Sync: app.Summary.Sync, Health: app.Summary.Health}
		return slim, nil
	}); err != nil {
		return nil, err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(obj, false) },
		DeleteFunc: func(obj any) { t.observe(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	go inf.Run(t.stop)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("hub application watch did not sync")
	}
	return t, nil
}

func (t *tracker) observe(obj any, deleted bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	app, ok := obj.(*argocd.Application)
	if !ok {
		return
	}
	if app.Summary == nil {
		deleted = true // not (or no longer) a pull-model Application
	}
	key := app.Namespace + "/" + app.Name
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.apps[key]; ok && old.healthy() {
		t.synced--
	}
	if deleted {
		delete(t.apps, key)
		return
	}
	view := appView{sync: app.Summary.Sync, health: app.Summary.Health}
	t.apps[key] = view
	if view.healthy() {
		t.synced++
	}
	if exp, ok := t.pending[key]; ok && exp.sync == view.sync && exp.health == view.health {
		t.latency = append(t.latency, latencySample{ChangedAt: exp.changedAt, Total: now.Sub(exp.changedAt), Hub: now.Sub(exp.sentAt)})
		delete(t.pending, key)
	}
}

func (v appView) healthy() bool { return v.sync == "Synced" && v.health == "Healthy" }

// expect records a status change on a cluster, sent by its agent at sentAt, that the hub Application
// namespace/name should show.
func (t *tracker) expect(key, sync, health string, changedAt, sentAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.apps[key]; ok && v.sync == sync && v.health == health {
		return // no change visible on the hub
	}
	t.pending[key] = expectation{sync: sync, health: health, changedAt: changedAt, sentAt: sentAt}
}

// counts returns how many Applications the hub has and how many are Synced and Healthy.
func (t *tracker) counts() (apps, synced int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.apps), t.synced
}

// latencies returns the measured status latencies, slowest last, and how many expected changes never showed.
func (t *tracker) latencies() ([]latencySample, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]latencySample(nil), t.latency...)
	sort.Slice(out, func(i, j int) bool { return out[i].Total < out[j].Total })
	return out, len(t.pending)
}

func (t *tracker) close() { close(t.stop) }

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}
