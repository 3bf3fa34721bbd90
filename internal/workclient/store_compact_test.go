package workclient

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// reportedWork is a work as an agent reports it for a synced Application with four resources: the work's
// conditions, each manifest's, and the Application's feedback (scalars and a raw-JSON value per status
// section), as the simulator and the work agent send them.
func reportedWork(i int) *workv1.ManifestWork {
	name := fmt.Sprintf("cluster%d-set-%02d", i/50, i%50)
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, i%60, 0, time.UTC))
	cond := func(t, reason, message string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: at, Reason: reason, Message: message}
	}
	str := func(s string) workv1.FieldValue { return workv1.FieldValue{Type: workv1.String, String: &s} }
	raw := func(v any) workv1.FieldValue {
		b, _ := json.Marshal(v)
		s := string(b)
		return workv1.FieldValue{Type: workv1.JsonRaw, JsonRaw: &s}
	}
	revision := fmt.Sprintf("%040x", i%50)
	source := map[string]any{"repoURL": fmt.Sprintf("https://git.example.com/fleet/set-%02d.git", i%50), "path": "apps", "targetRevision": "main"}
	var resources []any
	for r := range 4 {
		resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": fmt.Sprintf("set-%02d", i%50),
			"name": fmt.Sprintf("%s-%d", name, r), "status": "Synced"})
	}
	values := []workv1.FeedbackValue{
		{Name: appstatus.FeedbackSyncStatus, Value: str("Synced")},
		{Name: appstatus.FeedbackHealthStatus, Value: str("Healthy")},
		{Name: appstatus.FeedbackRevision, Value: str(revision)},
		{Name: appstatus.FeedbackOperationPhase, Value: str("Succeeded")},
		{Name: appstatus.FeedbackOperationStartedAt, Value: str(at.UTC().Format(time.RFC3339))},
		{Name: "status.sync", Value: raw(map[string]any{"status": "Synced", "revision": revision, "comparedTo": map[string]any{"source": source,
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": fmt.Sprintf("set-%02d", i%50)}}})},
		{Name: "status.health", Value: raw(map[string]any{"status": "Healthy", "lastTransitionTime": at})},
		{Name: "status.resources", Value: raw(resources)},
		{Name: "status.operationState", Value: raw(map[string]any{"phase": "Succeeded", "message": "successfully synced (all tasks run)",
			"startedAt": at, "finishedAt": at, "operation": map[string]any{"sync": map[string]any{"revision": revision, "source": source}},
			"syncResult": map[string]any{"revision": revision, "source": source, "resources": resources}})},
		{Name: "status.history", Value: raw([]any{map[string]any{"id": 0, "revision": revision, "deployedAt": at, "source": source}})},
		{Name: "status.summary", Value: raw(map[string]any{"images": []any{"quay.io/argoprojlabs/argocd-e2e-container:0.2"}})},
		{Name: "status.sourceType", Value: raw("Directory")},
		{Name: "count", Value: workv1.FieldValue{Type: workv1.Integer, Integer: func() *int64 { n := int64(i); return &n }()}},
		{Name: "ready", Value: workv1.FieldValue{Type: workv1.Boolean, Boolean: func() *bool { b := i%2 == 0; return &b }()}},
	}
	w := &workv1.ManifestWork{
		TypeMeta: workTypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("cluster%d", i/50), Name: name, UID: kubetypes.UID(fmt.Sprintf("uid-%d", i)),
			Generation: 1, ResourceVersion: "1", Labels: map[string]string{argocd.LabelPull: "true"},
			Annotations: map[string]string{argocd.AnnotationHubAppNamespace: "argocd", argocd.AnnotationHubAppName: name,
				common.CloudEventsSequenceIDAnnotationKey: fmt.Sprintf("18547188134675%05d", i)},
			Finalizers: []string{workv1.ManifestWorkFinalizer}},
		Status: workv1.ManifestWorkStatus{Conditions: []metav1.Condition{
			cond(workv1.WorkApplied, "AppliedManifestWorkComplete", "Apply manifest work complete"),
			cond(workv1.WorkAvailable, "ResourcesAvailable", "All resources are available")}},
	}
	for m, kind := range []string{"Namespace", "AppProject", "Application"} {
		mc := workv1.ManifestCondition{
			ResourceMeta: workv1.ManifestResourceMeta{Ordinal: int32(m), Group: "argoproj.io", Version: "v1alpha1", Kind: kind,
				Resource: "applications", Namespace: "argocd", Name: name},
			Conditions: []metav1.Condition{cond(workv1.ManifestApplied, "AppliedManifestComplete", "Apply manifest complete"),
				cond(workv1.ManifestAvailable, "ResourceAvailable", "Resource is available"),
				cond("StatusFeedbackSynced", "StatusFeedbackSynced", "")},
		}
		if kind == "Application" {
			mc.StatusFeedbacks.Values = values
		}
		w.Status.ResourceStatus.Manifests = append(w.Status.ResourceStatus.Manifests, mc)
	}
	return w
}

// TestCompactWorkRoundTrip: a work read from the store is the work stored, to the status hash the source
// client's resyncs compare with the server's.
func TestCompactWorkRoundTrip(t *testing.T) {
	s := newWorkStore()
	for _, w := range []*workv1.ManifestWork{storedWork(1, seq[0], 1), reportedWork(7), {ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "empty"}}} {
		k, err := s.compactWork(w)
		if err != nil {
			t.Fatal(err)
		}
		got := k.work()
		want := w.DeepCopy()
		want.TypeMeta = workTypeMeta
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s: read back\n%+v\nwant\n%+v", w.Name, got, want)
		}
		gotHash, _ := statushash.StatusHash(got)
		wantHash, _ := statushash.StatusHash(w)
		if gotHash != wantHash {
			t.Errorf("%s: status hash %s, want %s", w.Name, gotHash, wantHash)
		}
		if meta := k.metadata(); len(meta.Status.Conditions) != 0 || meta.Annotations[argocd.AnnotationHubAppName] != w.Annotations[argocd.AnnotationHubAppName] {
			t.Errorf("%s: metadata = %+v", w.Name, meta)
		}
	}
	// Each received status is compared with the stored one by its encoding: the same status is no change.
	a, _ := s.compactWork(reportedWork(7))
	b, _ := s.compactWork(reportedWork(7))
	c, _ := s.compactWork(reportedWork(8))
	if !a.sameStatus(b.status, b.codec) || a.sameStatus(c.status, c.codec) {
		t.Error("the encoding does not tell equal statuses from different ones")
	}
	t.Logf("a reported status: %d bytes encoded", len(a.status))
	if _, err := a.codec.decode(a.status[:len(a.status)/2]); err == nil {
		t.Error("a cut encoding decodes")
	}
}

// TestStatusCodecLearns: a store learns its dictionary from its first status with an Application's feedback;
// what it kept before still reads back, and the same status encoded before and after is no change.
func TestStatusCodecLearns(t *testing.T) {
	ctx := context.Background()
	s := newWorkStore()
	first := reportedWork(1)
	first.Status.ResourceStatus.Manifests[2].StatusFeedbacks.Values = nil // no feedback yet: nothing to learn from
	if err := s.Add(first); err != nil {
		t.Fatal(err)
	}
	kept := s.byKey["cluster0/cluster0-set-01"]
	if s.codec != vocabularyCodec || kept.codec != vocabularyCodec {
		t.Fatal("the store learned its dictionary from a status without feedback")
	}
	vocabularyOnly, _ := vocabularyCodec.encode(appendStatus(&reportedWork(2).Status))
	if err := s.Add(reportedWork(0)); err != nil {
		t.Fatal(err)
	}
	if s.codec == vocabularyCodec {
		t.Fatal("the store did not learn its dictionary from a status with feedback")
	}
	// The status kept before still reads back, and is the same status when it comes again.
	if got, _, _ := s.Get(ctx, "cluster0", "cluster0-set-01"); !equality.Semantic.DeepEqual(got.Status, first.Status) {
		t.Errorf("a status kept before the store learned reads back as %+v", got.Status)
	}
	again := first.DeepCopy()
	again.Labels, again.Annotations = nil, map[string]string{common.CloudEventsSequenceIDAnnotationKey: seq[0]}
	kept.seq = "1854718813467537400"
	if _, stored, _, err := s.applyStatus(klog.Background(), kept, again); err != nil || stored != nil {
		t.Errorf("the same status, encoded by the learned codec, is a change (%v)", err)
	}
	// A status of another Application takes fewer bytes with the learned dictionary.
	if err := s.Add(reportedWork(2)); err != nil {
		t.Fatal(err)
	}
	learned := s.byKey["cluster0/cluster0-set-02"]
	t.Logf("another Application's status: %d bytes plain, %d with the vocabulary, %d with the learned dictionary",
		len(appendStatus(&reportedWork(2).Status)), len(vocabularyOnly), len(learned.status))
	if len(learned.status) >= len(vocabularyOnly) {
		t.Errorf("the learned dictionary does not help: %d bytes against %d", len(learned.status), len(vocabularyOnly))
	}
}

// publishedWork is the work of reportedWork as the source client stores it when it publishes it: the metadata
// argocd-pull gives a work of an ApplicationSet's Application, and no status yet.
func publishedWork(i int) *workv1.ManifestWork {
	w := reportedWork(i)
	w.Status = workv1.ManifestWorkStatus{}
	w.Labels[argocd.LabelAppSet] = "true"
	w.Annotations[argocd.AnnotationHostingAppSet] = fmt.Sprintf("argocd/set-%02d", i%50)
	w.Annotations["argocd-pull.io/spec-hash"] = fmt.Sprintf("%064x", i)
	w.Annotations[common.CloudEventsSequenceIDAnnotationKey] = sequenceID(i, 0)
	return w
}

// sequenceID is the sequence ID of the n-th event of the i-th work: the works' are a millisecond apart.
func sequenceID(i, n int) string {
	return strconv.FormatInt(1854718813467537408+int64(i)<<22+int64(n), 10)
}

// TestStoreMemoryPerWork measures the heap a stored work takes, stored as the source client publishes it and
// then given the agent's status: kept as received, such a work took about 7.7 KB (4.1 KB of it the
// feedback), 1.1 GB at 150,000 works; with its status encoded and its annotations a map, 1.6 KB.
func TestStoreMemoryPerWork(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("memory figures of a -race build mean nothing")
	}
	const n = 20000
	ctx := context.Background()
	s := newWorkStore()
	perWork := testutil.HeapPerItem(n, func() {
		for i := range n {
			if err := s.Add(publishedWork(i)); err != nil {
				t.Fatal(err)
			}
			status := reportedWork(i)
			status.Labels = nil
			status.Annotations = map[string]string{common.CloudEventsSequenceIDAnnotationKey: sequenceID(i, 1)}
			if err := s.HandleReceivedResource(ctx, status); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("%.0f bytes per stored work", perWork)
	// 1,572 bytes with the annotations kept as a map (copied for each status), 1,046 encoded.
	if perWork > 1300 {
		t.Errorf("a stored work takes %.0f bytes, want at most 1300", perWork)
	}
	w, ok, _ := s.Get(ctx, "cluster1", "cluster1-set-03")
	if !ok || len(w.Status.ResourceStatus.Manifests) != 3 || len(w.Status.ResourceStatus.Manifests[2].StatusFeedbacks.Values) == 0 {
		t.Fatalf("the store lost a work or its status: %v", w)
	}
	runtime.KeepAlive(s)
}

// BenchmarkStatusCodec encodes and decodes the status of reportedWork with a store's learned dictionary: the
// controller's CPU per status event and per read of a work.
func BenchmarkStatusCodec(b *testing.B) {
	s := newWorkStore()
	if _, err := s.compactWork(reportedWork(0)); err != nil {
		b.Fatal(err)
	}
	status := reportedWork(1).Status
	var enc []byte
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var err error
			if enc, _, err = s.encodeStatus(&status); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc)), "bytes")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := s.codec.decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestStatusCodecLearnsBounded: the dictionary keeps the end of a long first status, not all of it: each
// encoding reads the whole dictionary.
func TestStatusCodecLearnsBounded(t *testing.T) {
	s := newWorkStore()
	w := reportedWork(0)
	values := w.Status.ResourceStatus.Manifests[2].StatusFeedbacks.Values
	long := `"` + strings.Repeat("x", 20000) + `"`
	values[len(values)-1].Value = workv1.FieldValue{Type: workv1.JsonRaw, JsonRaw: &long}
	if err := s.Add(w); err != nil {
		t.Fatal(err)
	}
	if s.codec == vocabularyCodec || len(s.codec.dict) != len(statusVocabulary)+maxLearned {
		t.Errorf("learned a dictionary of %d bytes from a status of %d, want %d", len(s.codec.dict),
			len(appendStatus(&w.Status)), len(statusVocabulary)+maxLearned)
	}
	if got, _, _ := s.Get(context.Background(), w.Namespace, w.Name); !equality.Semantic.DeepEqual(got.Status, w.Status) {
		t.Error("the long status does not read back")
	}
}
