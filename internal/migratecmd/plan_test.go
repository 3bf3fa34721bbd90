package migratecmd

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

const (
	kube = workclient.TransportKube
	grpc = workclient.TransportGRPC
)

// TestNext: from any labels a move can leave behind, the next step leads to the target, and the steps of a
// move from start to end are the ones the command takes.
func TestNext(t *testing.T) {
	for _, tc := range []struct {
		move workclient.Move
		to   string
		want step
	}{
		{workclient.Move{Home: kube}, grpc, stepStartCopy},
		{workclient.Move{Home: kube, CopyTo: grpc}, grpc, stepSwitch},
		{workclient.Move{Home: grpc, Retire: kube}, grpc, stepFinish},
		{workclient.Move{Home: grpc}, grpc, stepDone},
		// Going back half-way.
		{workclient.Move{Home: kube, CopyTo: grpc}, kube, stepCancelCopy},
		{workclient.Move{Home: kube, Retire: grpc}, kube, stepFinish},
		{workclient.Move{Home: grpc, Retire: kube}, kube, stepClearRetire},
		{workclient.Move{Home: kube, Retire: grpc}, grpc, stepClearRetire},
	} {
		if got := next(tc.move, tc.to); got != tc.want {
			t.Errorf("next(%+v, %s) = %s, want %s", tc.move, tc.to, got, tc.want)
		}
	}
}

func work(name, hash, uid string, applied bool) *workv1.ManifestWork {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: "c1", Name: name, Generation: 2,
		Annotations: map[string]string{application.AnnotationSpecHash: hash}}}
	if applied {
		w.Status.Conditions = []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue, ObservedGeneration: 2}}
	}
	m := workv1.ManifestCondition{ResourceMeta: workv1.ManifestResourceMeta{Group: argocd.Group, Resource: "applications", Name: name}}
	if uid != "" {
		m.StatusFeedbacks.Values = []workv1.FeedbackValue{{Name: appstatus.FeedbackUID, Value: workv1.FieldValue{Type: workv1.String, String: &uid}}}
	}
	w.Status.ResourceStatus.Manifests = []workv1.ManifestCondition{m}
	return w
}

func TestCopied(t *testing.T) {
	home := work("w", "h1", "u1", true)
	deleting := work("w", "h1", "u1", true)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		name    string
		home    *workv1.ManifestWork
		cp      *workv1.ManifestWork
		uid     string
		pending string
		err     string
	}{
		{name: "copied", home: home, cp: work("w", "h1", "u1", true), uid: "u1"},
		{name: "no copy", home: home, pending: "has no copy on grpc"},
		{name: "old copy being removed", home: home, cp: deleting, pending: "still being removed"},
		{name: "older spec", home: home, cp: work("w", "h0", "u1", true), pending: "latest spec"},
		{name: "not applied", home: home, cp: work("w", "h1", "u1", false), pending: "not applied"},
		{name: "no uid from the copy", home: home, cp: work("w", "h1", "", true), pending: "copy of work c1/w on grpc reports no Application uid"},
		{name: "no uid from home", home: work("w", "h1", "", true), cp: work("w", "h1", "u1", true), pending: "on kube reports no Application uid"},
		{name: "another object", home: home, cp: work("w", "h1", "u2", true), err: "reports the Application with uid u2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid, pending, err := copied(tc.home, tc.cp, kube, grpc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || uid != tc.uid || !strings.Contains(pending, tc.pending) || (tc.pending == "") != (pending == "") {
				t.Fatalf("copied = %q, %q, %v; want %q, %q", uid, pending, err, tc.uid, tc.pending)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	p := plan{cluster: "c1", move: workclient.Move{Home: kube}, works: map[string]int{kube: 3}, step: stepStartCopy}
	if got := p.describe(grpc); got != "copy 3 works to grpc, switch to grpc, orphan and remove the 3 works on kube" {
		t.Errorf("describe = %q", got)
	}
	left := plan{cluster: "c1", move: workclient.Move{Home: grpc}, works: map[string]int{kube: 2}, step: stepDone}
	if left.done() || !strings.Contains(left.describe(grpc), "2 works remain on kube") {
		t.Errorf("a cluster with works left on the other transport: done %v, %q", left.done(), left.describe(grpc))
	}
}
