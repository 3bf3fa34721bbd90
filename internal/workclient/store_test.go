package workclient

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Snowflake sequence IDs in increasing order.
var seq = []string{"1854718813467537408", "1854718813467537409", "1854718813467537410"}

// replace stores works as listed from the server, and marks the store synced, as the transport's list does.
func (s *workStore) replace(works []*workv1.ManifestWork) error { return s.replaceListed(works, nil) }

// replaceListed is replace with the status hashes the server listed with the works, by UID.
func (s *workStore) replaceListed(works []*workv1.ManifestWork, hashes map[kubetypes.UID]string) error {
	var errs []error
	for _, w := range works {
		errs = append(errs, s.listed(w, hashes[w.UID]))
	}
	s.listDone()
	return errors.Join(errs...)
}

func storedWork(gen int64, s string, applied int64) *workv1.ManifestWork {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: "c1", Name: "w", UID: kubetypes.UID(utils.UID("src", common.ManifestWorkGR.String(), "c1", "w")),
		Generation: gen, Labels: map[string]string{argocd.LabelPull: "true"},
		Annotations: map[string]string{argocd.AnnotationHubAppNamespace: "argocd", argocd.AnnotationHubAppName: "a"}}}
	if s != "" {
		w.Annotations[common.CloudEventsSequenceIDAnnotationKey] = s
	}
	if applied > 0 {
		w.Status.Conditions = []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue, ObservedGeneration: applied}}
	}
	return w
}

func statusEvent(gen int64, s string, applied int64) *workv1.ManifestWork {
	w := storedWork(gen, s, applied)
	w.Labels, w.Annotations = nil, map[string]string{common.CloudEventsSequenceIDAnnotationKey: s}
	return w
}

func TestStoreStatusRules(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		stored      *workv1.ManifestWork
		received    *workv1.ManifestWork
		wantApplied int64 // observedGeneration of the stored Applied condition after; -1: work removed
	}{
		{"newer status applied", storedWork(1, seq[0], 0), statusEvent(1, seq[1], 1), 1},
		{"older status ignored", storedWork(1, seq[1], 1), statusEvent(1, seq[0], 0), 1},
		{"status of a generation not stored yet is kept", storedWork(1, seq[0], 1), statusEvent(2, seq[1], 2), 2},
		{"deleted status removes the work", storedWork(1, seq[0], 1), func() *workv1.ManifestWork {
			w := statusEvent(1, seq[1], 1)
			w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: common.ResourceDeleted, Status: metav1.ConditionTrue})
			return w
		}(), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWorkStore()
			if err := s.replace([]*workv1.ManifestWork{tt.stored}); err != nil {
				t.Fatal(err)
			}
			if err := s.HandleReceivedResource(ctx, tt.received); err != nil {
				t.Fatal(err)
			}
			got, ok, _ := s.Get(ctx, "c1", "w")
			if tt.wantApplied < 0 {
				if ok || len(s.forApplication("argocd/a")) != 0 || len(s.byUID) != 0 {
					t.Fatal("work still stored or indexed")
				}
				return
			}
			if !ok || len(got.Status.Conditions) == 0 || got.Status.Conditions[0].ObservedGeneration != tt.wantApplied {
				t.Fatalf("stored status = %+v, want Applied at %d", got.Status, tt.wantApplied)
			}
		})
	}
	// The source client stores an update it published (generation 2, with the status it read before) after the
	// agent's status for generation 2 arrived: the newer status stays.
	s := newWorkStore()
	if err := s.replace([]*workv1.ManifestWork{storedWork(1, seq[0], 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.HandleReceivedResource(ctx, statusEvent(2, seq[1], 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(storedWork(2, seq[0], 1)); err != nil {
		t.Fatal(err)
	}
	got, _, _ := s.Get(ctx, "c1", "w")
	if got.Generation != 2 || got.Status.Conditions[0].ObservedGeneration != 2 || got.Annotations[common.CloudEventsSequenceIDAnnotationKey] != seq[1] {
		t.Fatalf("after the late store write: generation %d, status %+v, sequence %s", got.Generation, got.Status, got.Annotations[common.CloudEventsSequenceIDAnnotationKey])
	}
}

// TestStoreIgnoresLateDeletion: the source client stores a deletion after it published it; when the agent's
// confirmation (the Deleted status) came first, the late write must not bring the work back.
func TestStoreIgnoresLateDeletion(t *testing.T) {
	ctx := context.Background()
	s := newWorkStore()
	w := storedWork(1, seq[0], 1)
	if err := s.replace([]*workv1.ManifestWork{w}); err != nil {
		t.Fatal(err)
	}
	deleted := statusEvent(1, seq[1], 1)
	deleted.Status.Conditions = append(deleted.Status.Conditions, metav1.Condition{Type: common.ResourceDeleted, Status: metav1.ConditionTrue})
	if err := s.HandleReceivedResource(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	late := w.DeepCopy()
	now := metav1.Now()
	late.DeletionTimestamp = &now
	if err := s.Update(late); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, "c1", "w"); ok {
		t.Fatal("a late deletion brought the removed work back")
	}
	// A new work of the same name (same UID) is stored again.
	if err := s.Add(storedWork(1, "", 0)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, "c1", "w"); !ok {
		t.Fatal("a new work with the UID of a removed one was not stored")
	}
	if got := s.stuckClusters(time.Now().Add(-time.Minute)); len(got) != 0 {
		t.Fatalf("stuck clusters = %v, want none", got)
	}
	stuck := storedWork(2, "", 0)
	stuck.Namespace, stuck.Name = "c2", "w2"
	stuck.UID = kubetypes.UID(utils.UID("src", common.ManifestWorkGR.String(), "c2", "w2"))
	old := metav1.NewTime(time.Now().Add(-2 * time.Minute))
	stuck.DeletionTimestamp = &old
	if err := s.Add(stuck); err != nil {
		t.Fatal(err)
	}
	if got, want := s.stuckClusters(time.Now().Add(-time.Minute)), map[string]stuckWorks{"c2": {deleting: 1}}; !maps.Equal(got, want) {
		t.Fatalf("stuck clusters = %v, want %v", got, want)
	}
	// Both works were stored without a status from their agents: once that lasts, their clusters are stuck too,
	// until a status arrives.
	later := time.Now().Add(time.Second)
	if got, want := s.stuckClusters(later), map[string]stuckWorks{"c1": {unreported: 1}, "c2": {deleting: 1, unreported: 1}}; !maps.Equal(got, want) {
		t.Fatalf("stuck clusters = %v, want %v", got, want)
	}
	if err := s.HandleReceivedResource(ctx, statusEvent(1, seq[2], 1)); err != nil {
		t.Fatal(err)
	}
	if got, want := s.stuckClusters(later), map[string]stuckWorks{"c2": {deleting: 1, unreported: 1}}; !maps.Equal(got, want) {
		t.Fatalf("after a status of c1/w, stuck clusters = %v, want %v", got, want)
	}
}

// TestStoreKeepsEarlyStatus: the source client stores a new work after the server took it, and a quick agent's
// status can arrive first; it is kept for the work, unless it is a late status of a work removed before (the
// status of a work created again under the same name is newer than the removal).
func TestStoreKeepsEarlyStatus(t *testing.T) {
	ctx := context.Background()
	s := newWorkStore()
	if err := s.replace(nil); err != nil {
		t.Fatal(err)
	}
	var added []*workv1.ManifestWork
	if _, err := s.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { added = append(added, obj.(*workv1.ManifestWork)) }}); err != nil {
		t.Fatal(err)
	}
	if err := s.HandleReceivedResource(ctx, statusEvent(1, seq[0], 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(storedWork(1, "", 0)); err != nil {
		t.Fatal(err)
	}
	got, _, _ := s.Get(ctx, "c1", "w")
	if len(got.Status.Conditions) == 0 || got.Status.Conditions[0].ObservedGeneration != 1 || got.Annotations[common.CloudEventsSequenceIDAnnotationKey] != seq[0] {
		t.Fatalf("the status that came first is not stored: %+v", got.Status)
	}
	if len(added) != 1 || len(added[0].Finalizers) == 0 {
		t.Fatalf("the handlers were told %+v, want the work with its status once", added)
	}

	deleted := statusEvent(1, seq[1], 1)
	deleted.Status.Conditions = append(deleted.Status.Conditions, metav1.Condition{Type: common.ResourceDeleted, Status: metav1.ConditionTrue})
	if err := s.HandleReceivedResource(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	// A status older than the removal crosses it: ignored. The first status of the work created again is kept.
	for _, status := range []*workv1.ManifestWork{statusEvent(1, seq[0], 1), statusEvent(1, seq[2], 1)} {
		if err := s.HandleReceivedResource(ctx, status); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Add(storedWork(1, "", 0)); err != nil {
		t.Fatal(err)
	}
	got, _, _ = s.Get(ctx, "c1", "w")
	if got.Annotations[common.CloudEventsSequenceIDAnnotationKey] != seq[2] || len(got.Status.Conditions) == 0 {
		t.Fatalf("the work created again has status %+v at sequence %q, want its own first status (%s)", got.Status,
			got.Annotations[common.CloudEventsSequenceIDAnnotationKey], seq[2])
	}
	if len(s.early.items) != 0 {
		t.Fatalf("statuses still kept: %+v", s.early.items)
	}
}

// TestRecentByUIDExpires: a value is kept for its ttl and forgotten oldest first; a UID put again keeps its newer
// value.
func TestRecentByUIDExpires(t *testing.T) {
	r := newRecentByUID[string](time.Minute)
	now := time.Now()
	r.put("expired", "a", now.Add(-2*time.Minute))
	r.put("again", "b", now.Add(-2*time.Minute))
	r.put("again", "c", now)
	r.put("fresh", "d", now)
	if _, ok := r.get("expired"); ok {
		t.Error("a value older than its ttl is still kept")
	}
	if v, ok := r.get("again"); !ok || v != "c" {
		t.Errorf("the value put again is %q, want c", v)
	}
	if _, ok := r.get("fresh"); !ok || len(r.order) != 2 {
		t.Errorf("kept %+v in the order %+v, want again and fresh", r.items, r.order)
	}
	v, ok := r.take("fresh")
	if _, kept := r.get("fresh"); !ok || v != "d" || kept {
		t.Errorf("take returned %q, %v and left it kept: %v", v, ok, kept)
	}
}

// TestStoreKeepsFeedbackOverAnAgentRestart: a restarted agent's first report of a work has its manifests without
// feedback; the store keeps the feedback it had for them, and takes the agent's next report, with feedback, as
// it comes. A manifest whose feedback the agent has read keeps what the agent says, even with no values.
func TestStoreKeepsFeedbackOverAnAgentRestart(t *testing.T) {
	ctx := context.Background()
	s := newWorkStore()
	if err := s.replace(nil); err != nil {
		t.Fatal(err)
	}
	app := workv1.ManifestResourceMeta{Group: argocd.Group, Version: "v1alpha1", Kind: "Application", Resource: "applications", Namespace: "argocd", Name: "a"}
	withManifest := func(s string, feedback string, synced bool) *workv1.ManifestWork {
		w := statusEvent(1, s, 1)
		m := workv1.ManifestCondition{ResourceMeta: app, Conditions: []metav1.Condition{{Type: workv1.ManifestApplied, Status: metav1.ConditionTrue}}}
		if feedback != "" {
			m.StatusFeedbacks.Values = []workv1.FeedbackValue{{Name: "sync", Value: workv1.FieldValue{Type: workv1.String, String: &feedback}}}
		}
		if synced {
			m.Conditions = append(m.Conditions, metav1.Condition{Type: appstatus.StatusFeedbackSynced, Status: metav1.ConditionTrue, Reason: "StatusFeedbackSynced"})
		}
		w.Status.ResourceStatus.Manifests = []workv1.ManifestCondition{m}
		return w
	}
	feedbackOf := func() (string, bool) {
		got, _, _ := s.Get(ctx, "c1", "w")
		m := got.Status.ResourceStatus.Manifests[0]
		synced := meta.FindStatusCondition(m.Conditions, appstatus.StatusFeedbackSynced) != nil
		if len(m.StatusFeedbacks.Values) == 0 {
			return "", synced
		}
		return *m.StatusFeedbacks.Values[0].Value.String, synced
	}
	if err := s.Add(storedWork(1, seq[0], 0)); err != nil {
		t.Fatal(err)
	}
	sequence := []string{"1854718813467537411", "1854718813467537412", "1854718813467537413", "1854718813467537414"}
	steps := []struct {
		name         string
		received     *workv1.ManifestWork
		want         string
		wantSynced   bool
		unreadBefore bool
	}{
		{"the agent reads the feedback", withManifest(sequence[0], "Synced", true), "Synced", true, false},
		{"the restarted agent's first report", withManifest(sequence[1], "", false), "Synced", true, true},
		{"its next report, with feedback", withManifest(sequence[2], "OutOfSync", true), "OutOfSync", true, false},
		{"feedback read, and empty", withManifest(sequence[3], "", true), "", true, false},
	}
	for _, step := range steps {
		if err := s.HandleReceivedResource(ctx, step.received); err != nil {
			t.Fatal(err)
		}
		if got, synced := feedbackOf(); got != step.want || synced != step.wantSynced {
			t.Fatalf("%s: stored feedback %q (synced condition %v), want %q (%v)", step.name, got, synced, step.want, step.wantSynced)
		}
		if step.unreadBefore && len(step.received.Status.ResourceStatus.Manifests[0].StatusFeedbacks.Values) != 0 {
			t.Fatalf("%s: the received status was changed", step.name)
		}
	}
}

// TestStatusHashOncePerStatus: a resync's status hash of a work is sdk-go's, computed once for each status the
// store keeps, again when a new status arrives, and every time for a work without a sequence ID. The source
// client's lister gives a status resync the works whose hash is kept as their metadata, and gives them in full
// otherwise.
func TestStatusHashOncePerStatus(t *testing.T) {
	ctx := context.Background()
	calls := countStatusHashes(t)
	s := newWorkStore()
	if err := s.replace([]*workv1.ManifestWork{storedWork(1, seq[0], 1)}); err != nil {
		t.Fatal(err)
	}
	lister := sourceLister{s}
	var _ generic.Lister[*workv1.ManifestWork] = lister
	// resyncHash returns the hash a status resync sends, sdk-go's hash of the stored work, and whether the
	// resync's lister gave the work without its status.
	resyncHash := func() (got, want string, statusLess bool) {
		t.Helper()
		list, err := lister.List(forStatusResync(ctx), types.ListOptions{ClusterName: "c1"})
		if err != nil || len(list) != 1 {
			t.Fatalf("list for a status resync: %v, %d works", err, len(list))
		}
		if got, err = s.statusHash(list[0]); err != nil {
			t.Fatal(err)
		}
		full, err := lister.List(ctx, types.ListOptions{ClusterName: "c1"})
		if err != nil || len(full) != 1 || len(full[0].Status.Conditions) == 0 {
			t.Fatalf("list for a spec resync: %v, %d works, want one with its status", err, len(full))
		}
		if want, err = statushash.StatusHash(full[0]); err != nil {
			t.Fatal(err)
		}
		return got, want, len(list[0].Status.Conditions) == 0
	}
	first, want, statusLess := resyncHash()
	if first != want || *calls != 1 || statusLess {
		t.Fatalf("first resync: hash %s, sdk-go's %s, %d computed, listed without its status: %v", first, want, *calls, statusLess)
	}
	if again, _, statusLess := resyncHash(); again != first || *calls != 1 || !statusLess {
		t.Fatalf("second resync: hash %s (first %s), %d computed, want 1, listed without its status: %v", again, first, *calls, statusLess)
	}
	if err := s.HandleReceivedResource(ctx, statusEvent(1, seq[1], 2)); err != nil {
		t.Fatal(err)
	}
	if got, want, _ := resyncHash(); got != want || got == first || *calls != 2 {
		t.Fatalf("after a new status: hash %s, sdk-go's %s (the old %s), %d computed, want 2", got, want, first, *calls)
	}
	// The source client stores a work it updated with the status it read before: the newer status and its hash
	// stay.
	if err := s.Update(storedWork(2, seq[0], 1)); err != nil {
		t.Fatal(err)
	}
	if got, want, _ := resyncHash(); got != want || *calls != 2 {
		t.Fatalf("after a late store write: hash %s, sdk-go's %s, %d computed, want 2", got, want, *calls)
	}
	s = newWorkStore()
	lister = sourceLister{s}
	if err := s.replace([]*workv1.ManifestWork{storedWork(1, "", 1)}); err != nil {
		t.Fatal(err)
	}
	resyncHash()
	if got, want, statusLess := resyncHash(); got != want || *calls != 4 || statusLess {
		t.Fatalf("without a sequence ID: hash %s, sdk-go's %s, %d computed, want 4", got, want, *calls)
	}
}

// TestListedStatusHashes: the status hashes the server lists with the works serve the first resync, uncomputed;
// a listed hash is not kept for a work whose newer status the store already has.
func TestListedStatusHashes(t *testing.T) {
	ctx := context.Background()
	calls := countStatusHashes(t)
	resyncHash := func(s *workStore) string {
		t.Helper()
		w, ok, err := s.Get(ctx, "c1", "w")
		if err != nil || !ok {
			t.Fatalf("get: %v, %v", ok, err)
		}
		h, err := s.statusHash(w)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	listed := storedWork(1, seq[0], 1)
	s := newWorkStore()
	if err := s.replaceListed([]*workv1.ManifestWork{listed}, map[kubetypes.UID]string{listed.UID: "listed"}); err != nil {
		t.Fatal(err)
	}
	if h := resyncHash(s); h != "listed" || *calls != 0 {
		t.Fatalf("resync hash %s with %d computed, want the listed one and none", h, *calls)
	}
	s = newWorkStore()
	if err := s.replace([]*workv1.ManifestWork{storedWork(1, seq[1], 2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.replaceListed([]*workv1.ManifestWork{listed}, map[kubetypes.UID]string{listed.UID: "listed"}); err != nil {
		t.Fatal(err)
	}
	if h := resyncHash(s); h == "listed" || *calls != 1 {
		t.Fatalf("a newer status kept: resync hash %s with %d computed, want its own, computed", h, *calls)
	}
}

// countStatusHashes counts the store's computations of sdk-go's status hash until the test ends.
func countStatusHashes(t *testing.T) *int {
	calls := 0
	compute := computeStatusHash
	t.Cleanup(func() { computeStatusHash = compute })
	computeStatusHash = func(w *workv1.ManifestWork) (string, error) {
		calls++
		return compute(w)
	}
	return &calls
}
