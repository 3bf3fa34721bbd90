package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/patcher"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// worker processes works from the queue until it shuts down.
func (f *Fleet) worker(ctx context.Context) {
	for {
		k, quit := f.queue.Get()
		if quit {
			return
		}
		if err := f.process(ctx, k); err != nil && ctx.Err() == nil {
			f.failed(k, err)
		} else {
			f.queue.Forget(k)
		}
		f.queue.Done(k)
	}
}

// failed counts and logs a failed pass over a work, and queues the work again. While the server is unreachable
// the work is retried at a steady pace, as the work agent's status controller goes over every work again every
// few seconds and as the hub controller retries: a backoff that grows with the outage left statuses waiting
// 13 s more after a 10 s database outage. Other failures are retried with the queue's backoff.
func (f *Fleet) failed(k key, err error) {
	f.errors.Add(1)
	reason := "other"
	switch {
	case apierrors.IsConflict(err):
		reason = "conflict"
	case apierrors.IsNotFound(err):
		reason = "notfound"
	case workclient.Unreachable(err):
		reason = "unreachable"
	}
	f.errorsBy.WithLabelValues(reason).Inc()
	cluster := f.clusters[k.cluster].name
	switch reason {
	case "unreachable":
		// The transport's reconnects say what is awaited; a line per work would flood the log.
		f.logger.V(1).Info("Process work: the server is unreachable; retrying", "cluster", cluster, "work", k.work, "err", err)
		f.queue.Forget(k)
		f.queue.AddAfter(k, workclient.RetryUnreachable())
		return
	case "other":
		f.logger.Error(err, "Process work", "cluster", cluster, "work", k.work)
	default:
		f.logger.V(2).Info("Process work", "cluster", cluster, "work", k.work, "err", err)
	}
	f.queue.AddRateLimited(k)
}

// process does the next thing one work needs, as the work agent's controllers would: confirm its deletion,
// take it (kube: add the agent's finalizer), apply its manifests and report Applied, or report the Available
// conditions and the feedback of what it applied. Each step that writes a status ends the pass: the write
// comes back as an event, and the next pass starts from it.
func (f *Fleet) process(ctx context.Context, k key) error {
	c := f.clusters[k.cluster]
	w, ok := f.tr.get(c, k.work)
	if !ok {
		f.forget(c, k.work, nil)
		return nil
	}
	if !w.DeletionTimestamp.IsZero() {
		return f.deleteWork(ctx, c, w)
	}
	if f.tr.takesWorks() && !slices.Contains(w.Finalizers, workv1.ManifestWorkFinalizer) {
		// A copy: the patcher appends to the work's finalizers, and w is the transport's cached object.
		if _, err := f.patcher(c).AddFinalizer(ctx, w.DeepCopy(), workv1.ManifestWorkFinalizer); err != nil {
			return fmt.Errorf("add finalizer to work %s/%s: %w", c.name, w.Name, err)
		}
		return nil
	}
	sent, err := f.applyWork(ctx, c, w)
	if err != nil || sent {
		return err
	}
	return f.reportStatus(ctx, c, w)
}

func (f *Fleet) patcher(c *cluster) patcher.Patcher[*workv1.ManifestWork, workv1.ManifestWorkSpec, workv1.ManifestWorkStatus] {
	return patcher.NewPatcher[*workv1.ManifestWork, workv1.ManifestWorkSpec, workv1.ManifestWorkStatus](f.tr.client(c))
}

// applyWork applies a new generation of a work to the simulated cluster and reports it Applied, as the
// agent's manifest controller does. It reports whether it sent a status.
func (f *Fleet) applyWork(ctx context.Context, c *cluster, w *workv1.ManifestWork) (bool, error) {
	c.mu.Lock()
	sw := c.works[w.Name]
	current := sw != nil && sw.gen == w.Generation
	c.mu.Unlock()
	if current && appliedCurrent(w) {
		return false, nil
	}

	results, application := readManifests(w)
	if !current {
		f.applyGeneration(c, w, application)
	}

	status := appliedStatus(w, results)
	if statusEqual(&status, &w.Status) {
		return false, nil
	}
	c.mu.Lock()
	if sw := c.works[w.Name]; sw != nil {
		sw.sentGen = 0
	}
	c.mu.Unlock()
	if _, err := f.patcher(c).PatchStatus(ctx, w, status, w.Status); err != nil {
		return false, fmt.Errorf("report work %s/%s applied: %w", c.name, w.Name, err)
	}
	f.applied.Add(1)
	f.statusUpdates.Add(1)
	if h := f.cfg.Hooks.Applied; h != nil {
		h(Event{Cluster: c.name, Work: w.Name, HubNamespace: w.Annotations[argocd.AnnotationHubAppNamespace],
			HubName: w.Annotations[argocd.AnnotationHubAppName], Generation: w.Generation, At: time.Now()})
	}
	return true, nil
}

// applyGeneration records a work generation on the simulated cluster and hands its Application to the
// simulated Argo CD.
func (f *Fleet) applyGeneration(c *cluster, w *workv1.ManifestWork, application *manifestApp) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	sw := c.works[w.Name]
	if sw == nil {
		sw = &simWork{name: w.Name, index: int32(len(c.list))} //nolint:gosec // a cluster holds few works
		c.works[w.Name] = sw
		c.list = append(c.list, sw)
		f.works.Add(1)
	}
	sw.gen = w.Generation
	sw.hubNamespace, sw.hubName = w.Annotations[argocd.AnnotationHubAppNamespace], w.Annotations[argocd.AnnotationHubAppName]
	switch {
	case application != nil:
		if !sw.hasApp {
			sw.hasApp = true
			f.apps.Add(1)
		}
		f.cfg.Argo.apply(&sw.app, application, now, f.syncDelay())
	case sw.hasApp:
		// The new generation no longer carries the Application: Argo CD's copy is gone.
		f.dropApp(sw)
	}
}

// dropApp removes a work's Application. The cluster's lock is held.
func (f *Fleet) dropApp(sw *simWork) {
	sw.hasApp = false
	sw.app = app{}
	f.apps.Add(-1)
	if sw.reported {
		sw.reported = false
		f.syncedHealthy.Add(-1)
	}
}

// reportStatus sends the work's Available conditions and the feedback of its Application when they changed,
// as the agent's status controller does, and schedules the Application's next transition.
func (f *Fleet) reportStatus(ctx context.Context, c *cluster, w *workv1.ManifestWork) error {
	if meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied) == nil {
		return nil
	}
	now := time.Now()
	c.mu.Lock()
	sw := c.works[w.Name]
	var obj *unstructured.Unstructured
	var seq uint32
	var due, changed int64
	unchanged := false
	if sw != nil && sw.hasApp {
		// Nothing changed since the last status sent: this event is that status coming back.
		unchanged = sw.sentGen == w.Generation && sw.sentChange == sw.app.changedAt && (sw.app.due == 0 || now.UnixNano() < sw.app.due)
		if !unchanged {
			sw.app.advance(now)
			obj = f.applicationObject(&sw.app)
		}
		seq, due, changed = sw.seq, sw.app.due, sw.app.changedAt
	}
	c.mu.Unlock()
	// Every pass schedules the next transition again: the queue keeps one wake-up per work, the earliest, so a
	// retry after an error replaces it; and a timer can fire a little before the wall clock reaches due.
	if due > 0 {
		f.queue.AddAfter(key{cluster: c.index, work: w.Name}, max(time.Until(time.Unix(0, due)), time.Millisecond))
	}
	if unchanged {
		return nil
	}

	status := availableStatus(w, liveObjects(w, obj), f.reader)
	if statusEqual(&status, &w.Status) {
		return nil
	}
	if _, err := f.patcher(c).PatchStatus(ctx, w, status, w.Status); err != nil {
		return fmt.Errorf("report status of work %s/%s: %w", c.name, w.Name, err)
	}
	f.statusUpdates.Add(1)
	ev := Event{Cluster: c.name, Work: w.Name, HubNamespace: w.Annotations[argocd.AnnotationHubAppNamespace],
		HubName: w.Annotations[argocd.AnnotationHubAppName], Generation: w.Generation, At: time.Now()}
	if obj != nil {
		ev.ChangedAt = time.Unix(0, changed)
		ev.Sync, _, _ = unstructured.NestedString(obj.Object, "status", "sync", "status")
		ev.Health, _, _ = unstructured.NestedString(obj.Object, "status", "health", "status")
	}
	f.reported(c, w.Name, w.Generation, changed, seq, ev)
	return nil
}

// reported records a status that was sent and tells whoever waits for it.
func (f *Fleet) reported(c *cluster, work string, gen, changed int64, seq uint32, ev Event) {
	syncedHealthy := ev.Sync == SyncSynced && ev.Health == HealthHealthy
	becameSynced := false
	var notify []waiter
	c.mu.Lock()
	if sw := c.works[work]; sw != nil && sw.hasApp {
		sw.sentGen, sw.sentChange = gen, changed
		if sw.reported != syncedHealthy {
			sw.reported = syncedHealthy
			becameSynced = syncedHealthy
			if syncedHealthy {
				f.syncedHealthy.Add(1)
			} else {
				f.syncedHealthy.Add(-1)
			}
		}
	}
	if ws := c.waiters[work]; len(ws) > 0 {
		keep := ws[:0]
		for _, w := range ws {
			if w.seq <= seq {
				notify = append(notify, w)
			} else {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(c.waiters, work)
		} else {
			c.waiters[work] = keep
		}
	}
	c.mu.Unlock()
	for _, w := range notify {
		w.ch <- ev
	}
	if h := f.cfg.Hooks.StatusSent; h != nil {
		h(ev)
	}
	if h := f.cfg.Hooks.Synced; h != nil && becameSynced {
		h(ev)
	}
}

// applicationObject is the simulated Application as the agent would read it from the cluster. The cluster's
// lock is held.
func (f *Fleet) applicationObject(a *app) *unstructured.Unstructured {
	obj := argocd.NewApplication()
	obj.SetName(a.name)
	obj.SetNamespace(a.namespace)
	obj.Object["status"] = f.cfg.Argo.status(a)
	return obj
}

// liveObjects reads the manifests of a work on the simulated cluster: the Application from the simulated
// Argo CD, every other manifest that applied as a bare object.
func liveObjects(w *workv1.ManifestWork, application *unstructured.Unstructured) objectReader {
	return func(m workv1.ManifestResourceMeta) *unstructured.Unstructured {
		if m.Group == argocd.Group && m.Kind == argocd.ApplicationGVK.Kind {
			if application != nil && application.GetName() == m.Name && application.GetNamespace() == m.Namespace {
				return application
			}
			return nil
		}
		for _, mc := range w.Status.ResourceStatus.Manifests {
			if mc.ResourceMeta == m {
				if !meta.IsStatusConditionTrue(mc.Conditions, workv1.ManifestApplied) {
					return nil
				}
				obj := &unstructured.Unstructured{}
				obj.SetAPIVersion(m.Group + "/" + m.Version)
				if m.Group == "" {
					obj.SetAPIVersion(m.Version)
				}
				obj.SetKind(m.Kind)
				obj.SetName(m.Name)
				obj.SetNamespace(m.Namespace)
				return obj
			}
		}
		return nil
	}
}

// deleteWork removes a deleted work's Application from the simulated cluster and confirms the deletion by
// removing the agent's finalizer, as the agent does once the work's manifests are gone.
func (f *Fleet) deleteWork(ctx context.Context, c *cluster, w *workv1.ManifestWork) error {
	f.forget(c, w.Name, w)
	if !slices.Contains(w.Finalizers, workv1.ManifestWorkFinalizer) {
		return nil
	}
	// The patcher takes a work it does not find for one already gone, and sdk-go's agent store hands a work to
	// the watch before it stores it: a deleting work that has just arrived (a restarted agent gets every deletion
	// it missed at once) would be found nowhere, and its deletion never confirmed. While the watch still shows
	// the work, the work is there: try again.
	if !f.tr.stored(ctx, c, w.Name) {
		if _, shown := f.tr.get(c, w.Name); shown {
			return apierrors.NewNotFound(workv1.Resource("manifestworks"), w.Name)
		}
		return nil
	}
	if err := f.patcher(c).RemoveFinalizer(ctx, w, workv1.ManifestWorkFinalizer); err != nil {
		return fmt.Errorf("remove finalizer of work %s/%s: %w", c.name, w.Name, err)
	}
	return nil
}

// forget removes a work and its Application from the simulated cluster.
func (f *Fleet) forget(c *cluster, name string, w *workv1.ManifestWork) {
	c.mu.Lock()
	sw := c.works[name]
	if sw == nil {
		c.mu.Unlock()
		return
	}
	if sw.hasApp {
		f.dropApp(sw)
	}
	delete(c.works, name)
	last := len(c.list) - 1
	c.list[sw.index] = c.list[last]
	c.list[sw.index].index = sw.index
	c.list[last] = nil
	c.list = c.list[:last]
	waiters := c.waiters[name]
	delete(c.waiters, name)
	c.mu.Unlock()
	f.works.Add(-1)
	f.deletions.Add(1)
	for _, wt := range waiters {
		wt.ch <- Event{}
	}
	if h := f.cfg.Hooks.Deleted; h != nil {
		ev := Event{Cluster: c.name, Work: name, HubNamespace: sw.hubNamespace, HubName: sw.hubName, Generation: sw.gen, At: time.Now()}
		if w != nil {
			ev.Generation = w.Generation
		}
		h(ev)
	}
}
