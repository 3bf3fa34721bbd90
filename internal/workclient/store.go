package workclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/store"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// workStore is the grpc transport's cache of the works this source owns. It is the sdk-go source client's
// ClientWatcherStore (the client reads and updates it, and hands it the status events from the server) and it
// is the informer the controllers watch. Works are indexed by UID, by namespace/name, by namespace and by hub
// Application, and kept without their spec: the server holds the specs, the controllers need metadata (with
// the spec hash) and status. Their status is kept compact (keptWork); Get and List rebuild works in full,
// and the event handlers receive the works' metadata.
type workStore struct {
	mu          sync.RWMutex
	byKey       map[string]*keptWork           // namespace/name
	byUID       map[kubetypes.UID]string       // uid -> namespace/name
	byApp       map[string][]string            // hub application key -> namespace/name of its works (one but in a move)
	byNamespace map[string]map[string]struct{} // namespace (cluster) -> namespace/name set
	handlers    []*registration
	synced      bool
	// The source client stores what it published only once the server took it, and a quick agent's answer
	// can come first:
	//   - removed remembers the works that a Deleted status removed, with its sequence ID, so that their
	//     deletion, stored late, does not bring them back, and their late statuses are told from the first
	//     ones of a work created again under the same name;
	//   - early keeps the statuses of works not stored yet, for the work the source client stores next.
	removed recentByUID[string]
	early   recentByUID[*workv1.ManifestWork]
	// unreported holds, by UID, when each work the source client created without a status was
	// stored, until a status of it arrives: should the agent's first status be lost (it reached the server
	// while the subscription was down, or before a publish whose answer was lost was made again), a periodic
	// resync of its cluster brings it back (GRPC.resyncStuck).
	unreported map[kubetypes.UID]time.Time
	// codec encodes the statuses: vocabularyCodec until the store learns its dictionary (statusCodec); plain is
	// where it encodes them before compressing them, under the lock.
	codec *statusCodec
	plain []byte
}

const (
	// tombstoneTTL is how long a removed work's deletion may still arrive from the source client.
	tombstoneTTL = 5 * time.Minute
	// earlyStatusTTL is how long the status of a work not stored yet waits for the source client to store it.
	earlyStatusTTL = time.Minute
)

var (
	_ store.ClientWatcherStore[*workv1.ManifestWork] = (*workStore)(nil)
	_ cache.Informer                                 = (*workStore)(nil)
)

func newWorkStore() *workStore {
	s := &workStore{
		removed: newRecentByUID[string](tombstoneTTL),
		early:   newRecentByUID[*workv1.ManifestWork](earlyStatusTTL),
		codec:   vocabularyCodec,
	}
	s.clearWorks()
	return s
}

// clearWorks empties the works and their indexes; the caller holds the lock, or has the store to itself.
func (s *workStore) clearWorks() {
	s.byKey = map[string]*keptWork{}
	s.byUID = map[kubetypes.UID]string{}
	s.byApp = map[string][]string{}
	s.byNamespace = map[string]map[string]struct{}{}
	s.unreported = map[kubetypes.UID]time.Time{}
}

func storeKey(namespace, name string) string { return namespace + "/" + name }

// listed stores a work listed from the server, as the list goes, with the status hash the server sent with it
// (argocd-pull server's; a Maestro sends none): the first resync after a start then sends it instead of
// computing sdk-go's hash of every work (2.3 s of the controller's CPU at 15,000 works). The handlers hear of
// the work when the list is done (listDone). Storing the works page by page, compacted, rather than holding
// the whole list until it ends, is what bounds a restarted controller's memory: the list of 150,000 works,
// decoded, was 1.1 GB of its 1.6 GB live heap (docs/benchmarks.md).
func (s *workStore) listed(w *workv1.ManifestWork, statusHash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, stored, err := s.put(w)
	if err != nil {
		return err
	}
	if statusHash != "" && stored.hasStatusOf(w) {
		stored.statusHash = statusHash
	}
	return nil
}

// listFailed forgets what a list that failed midway stored, before the next attempt lists again: a work
// removed from the server in between must not stay. Once the store is synced it keeps what it has.
func (s *workStore) listFailed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.synced {
		s.clearWorks()
	}
}

// listDone marks the store synced and tells the handlers of every work listed.
func (s *workStore) listDone() {
	s.mu.Lock()
	s.synced = true
	handlers := append([]*registration(nil), s.handlers...)
	s.mu.Unlock()
	s.replay(handlers)
}

// replayChunk is how many works replay rebuilds at a time.
const replayChunk = 1000

// replay tells handlers of every work stored, as added in the initial list, a chunk of works at a time:
// rebuilding the metadata of all 150,000 at once is 150,000 objects alive together. A work removed before its
// chunk is skipped; one stored after the handlers were registered may be told twice, which a handler that
// queues keys takes as once.
func (s *workStore) replay(handlers []*registration) {
	if len(handlers) == 0 {
		return
	}
	s.mu.RLock()
	keys := slices.Collect(maps.Keys(s.byKey))
	s.mu.RUnlock()
	works := make([]*workv1.ManifestWork, 0, min(len(keys), replayChunk))
	for chunk := range slices.Chunk(keys, replayChunk) {
		works = works[:0]
		s.mu.RLock()
		for _, key := range chunk {
			if w := s.byKey[key]; w != nil {
				works = append(works, w.metadata())
			}
		}
		s.mu.RUnlock()
		for _, w := range works {
			for _, h := range handlers {
				h.handler.OnAdd(w, true)
			}
		}
	}
	for _, h := range handlers {
		h.replayed.Store(true)
	}
}

// put stores a work (without its spec) and returns the one it replaced, if any, and the one stored; the
// caller holds the lock. The source client writes a work it read and patched; when a newer status arrived in
// between, the stored status wins.
func (s *workStore) put(w *workv1.ManifestWork) (old, stored *keptWork, err error) {
	sw, err := s.compactWork(w)
	if err != nil {
		return nil, nil, err
	}
	key := storeKey(w.Namespace, w.Name)
	old = s.byKey[key]
	if old != nil {
		s.unindex(old, key)
		if old.seq != sw.seq {
			if newer, err := utils.CompareSnowflakeSequenceIDs(sw.seq, old.seq); err == nil && newer {
				sw.seq = old.seq
				sw.status, sw.codec, sw.statusHash = old.status, old.codec, old.statusHash
				sw.meta.Finalizers = old.meta.Finalizers
			}
		}
	}
	s.byKey[key] = sw
	s.byUID[sw.meta.UID] = key
	if app := sw.applicationKey(); app != "" && !slices.Contains(s.byApp[app], key) {
		s.byApp[app] = append(s.byApp[app], key)
	}
	addToIndex(s.byNamespace, sw.meta.Namespace, key)
	return old, sw, nil
}

func addToIndex(index map[string]map[string]struct{}, value, key string) {
	if index[value] == nil {
		index[value] = map[string]struct{}{}
	}
	index[value][key] = struct{}{}
}

func removeFromIndex(index map[string]map[string]struct{}, value, key string) {
	delete(index[value], key)
	if len(index[value]) == 0 {
		delete(index, value)
	}
}

func (s *workStore) remove(namespace, name string) *keptWork {
	key := storeKey(namespace, name)
	old := s.byKey[key]
	if old == nil {
		return nil
	}
	delete(s.byKey, key)
	delete(s.byUID, old.meta.UID)
	delete(s.unreported, old.meta.UID)
	s.unindex(old, key)
	return old
}

func (s *workStore) unindex(w *keptWork, key string) {
	if app := w.applicationKey(); app != "" {
		if keys := slices.DeleteFunc(s.byApp[app], func(k string) bool { return k == key }); len(keys) > 0 {
			s.byApp[app] = keys
		} else {
			delete(s.byApp, app)
		}
	}
	removeFromIndex(s.byNamespace, w.meta.Namespace, key)
}

// Add stores a work the source client created and tells the handlers.
func (s *workStore) Add(obj runtime.Object) error {
	w, ok := obj.(*workv1.ManifestWork)
	if !ok {
		return fmt.Errorf("unexpected object %T", obj)
	}
	s.mu.Lock()
	if _, gone := s.removed.get(w.UID); gone && !w.DeletionTimestamp.IsZero() {
		// The deletion of a work whose removal was already confirmed: nothing to store.
		s.mu.Unlock()
		return nil
	}
	s.removed.take(w.UID)
	old, stored, err := s.put(w)
	if early, ok := s.early.take(w.UID); ok && err == nil && old == nil {
		// The agent's status came before the source client stored the new work.
		if _, updated, _, serr := s.applyStatus(klog.Background().WithValues("workUID", w.UID), stored, early); serr == nil && updated != nil {
			stored = updated
		}
	}
	if err == nil && old == nil && stored.seq == "" {
		s.unreported[w.UID] = time.Now()
	}
	handlers := append([]*registration(nil), s.handlers...)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.notify(handlers, old, stored)
	return nil
}

// Update stores a work the source client changed and tells the handlers.
func (s *workStore) Update(obj runtime.Object) error { return s.Add(obj) }

// Delete removes a work and tells the handlers.
func (s *workStore) Delete(obj runtime.Object) error {
	w, ok := obj.(*workv1.ManifestWork)
	if !ok {
		return fmt.Errorf("unexpected object %T", obj)
	}
	s.mu.Lock()
	old := s.remove(w.Namespace, w.Name)
	handlers := append([]*registration(nil), s.handlers...)
	s.mu.Unlock()
	if old != nil {
		notifyDelete(handlers, old)
	}
	return nil
}

// notifyDelete tells the handlers of a removed work, with its metadata.
func notifyDelete(handlers []*registration, old *keptWork) {
	if len(handlers) == 0 {
		return
	}
	w := old.metadata()
	for _, h := range handlers {
		h.handler.OnDelete(w)
	}
}

// notify tells the handlers of a stored work, with the works' metadata, which they share as the handlers of
// an informer share its objects.
func (s *workStore) notify(handlers []*registration, old, stored *keptWork) {
	if len(handlers) == 0 {
		return
	}
	if old == nil {
		w := stored.metadata()
		for _, h := range handlers {
			h.handler.OnAdd(w, false)
		}
		return
	}
	before, after := old.metadata(), stored.metadata()
	for _, h := range handlers {
		h.handler.OnUpdate(before, after)
	}
}

// HandleReceivedResource applies a status event from the server to the stored work, as the sdk-go source store
// does, but finds the work by UID in a map rather than by scanning every work, and reads and writes it under
// one lock so that a concurrent spec update is not lost.
func (s *workStore) HandleReceivedResource(ctx context.Context, received *workv1.ManifestWork) error {
	logger := klog.FromContext(ctx).WithValues("workUID", received.UID)
	s.mu.Lock()
	last := s.byKey[s.byUID[received.UID]]
	old, stored, deleted, err := s.applyStatus(logger, last, received)
	handlers := append([]*registration(nil), s.handlers...)
	s.mu.Unlock()
	switch {
	case err != nil:
		return err
	case deleted != nil:
		notifyDelete(handlers, deleted)
	case stored != nil:
		s.notify(handlers, old, stored)
	}
	return nil
}

// applyStatus decides what a status event does to the stored work; the caller holds the lock. It returns the
// work before and after an update, or the removed work.
func (s *workStore) applyStatus(logger klog.Logger, last *keptWork, received *workv1.ManifestWork) (old, stored, deleted *keptWork, err error) {
	final := meta.IsStatusConditionTrue(received.Status.Conditions, common.ResourceDeleted)
	seq := received.Annotations[common.CloudEventsSequenceIDAnnotationKey]
	if last == nil {
		if final || !s.afterRemoval(received.UID, seq) {
			// A status of a work deleted here already (its final "Deleted" status, or one that crossed the delete).
			logger.V(2).Info("Ignoring the status of an unknown work")
			return nil, nil, nil, nil
		}
		// The status of a work the source client published and has not stored yet: kept for it.
		logger.V(2).Info("Keeping the status of a work not stored yet")
		s.early.put(received.UID, received, time.Now())
		return nil, nil, nil, nil
	}
	if final {
		s.removed.put(last.meta.UID, seq, time.Now())
		return nil, nil, s.remove(last.meta.Namespace, last.meta.Name), nil
	}
	delete(s.unreported, last.meta.UID)
	// A status for a newer generation than stored is kept: the source client publishes an update before it
	// stores the new generation, so the agent's answer can arrive first. put keeps the newer status when the
	// update is stored.
	newer, err := utils.CompareSnowflakeSequenceIDs(last.seq, seq)
	if err != nil {
		logger.Error(err, "Ignoring a status with an invalid sequence ID", "sequenceID", seq)
		return nil, nil, nil, nil
	}
	if !newer {
		return nil, nil, nil, nil
	}
	status, codec, err := s.encodeStatus(withKeptFeedback(&received.Status, last))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("store the status of work %s/%s: %w", last.meta.Namespace, last.meta.Name, err)
	}
	if last.sameStatus(status, codec) {
		return nil, nil, nil, nil
	}
	// The stored metadata is read only: the updated work shares it but for the sequence ID, the status's, and
	// the finalizers, which must include the work's.
	updated := &keptWork{meta: last.meta, annotations: last.annotations, seq: seq, status: status, codec: codec}
	updated.meta.Finalizers = utils.EnsureManifestWorkFinalizer(slices.Clip(last.meta.Finalizers))
	// The key the indexes hold: a new, equal string would replace the map's key and keep two of them.
	key, ok := s.byUID[last.meta.UID]
	if !ok {
		key = storeKey(last.meta.Namespace, last.meta.Name)
	}
	s.byKey[key] = updated
	return last, updated, nil, nil
}

// afterRemoval reports whether a status of a work not stored is newer than the work's removal, if it was
// removed lately; the caller holds the lock.
func (s *workStore) afterRemoval(uid kubetypes.UID, seq string) bool {
	removedSeq, ok := s.removed.get(uid)
	if !ok {
		return true
	}
	newer, err := utils.CompareSnowflakeSequenceIDs(removedSeq, seq)
	return err == nil && newer
}

// GetWatcher is not used: the controllers take events from the store's handlers.
func (s *workStore) GetWatcher(context.Context, string, metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("the grpc transport's work store delivers events to handlers, not watchers")
}

// List returns the works of a namespace (all namespaces when empty).
func (s *workStore) List(_ context.Context, namespace string, opts metav1.ListOptions) (*store.ResourceList[*workv1.ManifestWork], error) {
	selector := labels.Everything()
	if opts.LabelSelector != "" {
		var err error
		if selector, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, fmt.Errorf("parse label selector %q: %w", opts.LabelSelector, err)
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := &store.ResourceList[*workv1.ManifestWork]{}
	s.each(namespace, func(w *keptWork) {
		if selector.Matches(labels.Set(w.meta.Labels)) {
			list.Items = append(list.Items, w.work())
		}
	})
	return list, nil
}

// each calls f with every kept work of a namespace (all namespaces when empty); the caller holds the lock.
func (s *workStore) each(namespace string, f func(*keptWork)) {
	if namespace == "" {
		for _, w := range s.byKey {
			f(w)
		}
		return
	}
	for key := range s.byNamespace[namespace] {
		f(s.byKey[key])
	}
}

// listForStatusResync returns the works of a namespace (all namespaces when empty) for a status resync, which
// needs of each its UID and its status hash (statusHash): a work whose hash the store keeps comes as its
// metadata, which the caller must not modify, and only the others are rebuilt in full. Rebuilding every work
// (its status decoded) was the largest allocation of a restarted controller: 220 MB at 15,000 works, as every
// cluster is resynced once the source client subscribes.
func (s *workStore) listForStatusResync(namespace string) []*workv1.ManifestWork {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*workv1.ManifestWork
	s.each(namespace, func(w *keptWork) {
		if w.statusHash != "" && w.seq != "" {
			out = append(out, w.metadata())
			return
		}
		out = append(out, w.work())
	})
	return out
}

// sourceLister is the source client's lister of the store's works. The client lists a cluster's works for two
// things: a status resync, for which the store lists them as listForStatusResync does when the context says so
// (forStatusResync), and an answer to an agent's spec resync, which needs them in full.
type sourceLister struct{ s *workStore }

type statusResyncKey struct{}

// forStatusResync marks a context for the source client's status resync (CloudEventSourceClient.Resync).
func forStatusResync(ctx context.Context) context.Context {
	return context.WithValue(ctx, statusResyncKey{}, true)
}

func (l sourceLister) List(ctx context.Context, o types.ListOptions) ([]*workv1.ManifestWork, error) {
	if ctx.Value(statusResyncKey{}) != nil {
		return l.s.listForStatusResync(o.ClusterName), nil
	}
	list, err := l.s.List(ctx, o.ClusterName, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// statusHash is sdk-go's status hash (statushash.StatusHash) of a work the store listed for a resync, computed
// once for each status it keeps: every (re)subscription of the source client resyncs each cluster with the hashes
// of all its works, and at 15,000 works computing them all took 3.3 s of the controller's CPU at each (a
// restarted server, a reconnection). A kept status is told by its sequence ID, which the server gives each
// status it stores; a work without one is hashed each time. A work listed as its metadata whose status changed
// before its hash was asked for gets the hash of no status: the server then sends the status again.
func (s *workStore) statusHash(w *workv1.ManifestWork) (string, error) {
	key := storeKey(w.Namespace, w.Name)
	s.mu.RLock()
	k := s.byKey[key]
	hash := ""
	if k != nil && k.hasStatusOf(w) {
		hash = k.statusHash
	}
	s.mu.RUnlock()
	if hash != "" {
		return hash, nil
	}
	hash, err := computeStatusHash(w)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if k != nil && s.byKey[key] == k && k.hasStatusOf(w) {
		k.statusHash = hash
	}
	s.mu.Unlock()
	return hash, nil
}

// computeStatusHash is sdk-go's status hash; a test counts its calls.
var computeStatusHash = statushash.StatusHash[*workv1.ManifestWork]

// hasStatusOf reports whether the kept work is w with the same status: the same work and status sequence ID.
func (k *keptWork) hasStatusOf(w *workv1.ManifestWork) bool {
	seq := w.Annotations[common.CloudEventsSequenceIDAnnotationKey]
	return seq != "" && k.meta.UID == w.UID && k.seq == seq
}

// ListAll returns every work.
func (s *workStore) ListAll(ctx context.Context) ([]*workv1.ManifestWork, error) {
	l, err := s.List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Get returns a stored work, rebuilt in full.
func (s *workStore) Get(_ context.Context, namespace, name string) (*workv1.ManifestWork, bool, error) {
	s.mu.RLock()
	w, ok := s.byKey[storeKey(namespace, name)]
	s.mu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	return w.work(), true, nil
}

// HasInitiated reports whether the works were listed from the server.
func (s *workStore) HasInitiated() bool { return s.HasSynced() }

// forApplication returns copies of the metadata of a hub Application's works.
func (s *workStore) forApplication(appKey string) []*workv1.ManifestWork {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*workv1.ManifestWork, 0, len(s.byApp[appKey]))
	for _, key := range s.byApp[appKey] {
		w := &workv1.ManifestWork{TypeMeta: workTypeMeta}
		s.byKey[key].copyMeta(&w.ObjectMeta)
		out = append(out, w)
	}
	return out
}

// namespaces returns the namespaces (clusters) that have works.
func (s *workStore) namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byNamespace))
	for ns := range s.byNamespace {
		out = append(out, ns)
	}
	return out
}

// stuckClusters returns the clusters with a work deleting, or created and without any status from its agent,
// since before the given time; each with how many of its works are stuck so.
func (s *workStore) stuckClusters(before time.Time) map[string]stuckWorks {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]stuckWorks{}
	for _, w := range s.byKey {
		if !w.meta.DeletionTimestamp.IsZero() && w.meta.DeletionTimestamp.Time.Before(before) {
			n := out[w.meta.Namespace]
			n.deleting++
			out[w.meta.Namespace] = n
		}
	}
	for uid, at := range s.unreported {
		if w := s.byKey[s.byUID[uid]]; w != nil && at.Before(before) {
			n := out[w.meta.Namespace]
			n.unreported++
			out[w.meta.Namespace] = n
		}
	}
	return out
}

// stuckWorks counts a cluster's works whose deletion is unconfirmed, and those without a status, for a while.
type stuckWorks struct{ deleting, unreported int }

// registration is an event handler of the store.
type registration struct {
	handler toolscache.ResourceEventHandler
	// replayed is set once the handler was told of every work listed: what an informer's handler reports as
	// synced.
	replayed atomic.Bool
}

func (r *registration) HasSynced() bool { return r.replayed.Load() }

// AddEventHandler registers a handler and replays the stored works to it.
func (s *workStore) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	reg := &registration{handler: h}
	s.mu.Lock()
	s.handlers = append(s.handlers, reg)
	listed := s.synced // else listDone replays the works to it
	s.mu.Unlock()
	if listed {
		s.replay([]*registration{reg})
	}
	return reg, nil
}

// AddEventHandlerWithResyncPeriod registers a handler; the store does not resync.
func (s *workStore) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandler(h)
}

// AddEventHandlerWithOptions registers a handler; the store does not resync.
func (s *workStore) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandler(h)
}

// RemoveEventHandler unregisters a handler.
func (s *workStore) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range s.handlers {
		if h == handle {
			s.handlers = append(s.handlers[:i], s.handlers[i+1:]...)
			return nil
		}
	}
	return nil
}

// AddIndexers is not supported: the store keeps its own indexes.
func (s *workStore) AddIndexers(toolscache.Indexers) error {
	return errors.New("the grpc transport's work store does not take indexers")
}

// HasSynced reports whether the works were listed from the server.
func (s *workStore) HasSynced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

// IsStopped reports whether the store stopped; it runs as long as the process.
func (s *workStore) IsStopped() bool { return false }
