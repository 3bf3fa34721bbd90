package gitopscluster

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

func TestRegistersAndRemovesClusters(t *testing.T) {
	s := startSuite(t)
	ns := "reg-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "reg-c1", "reg-c2")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	key := client.ObjectKeyFromObject(gc)
	owner := ns + "/gc"

	s.waitClusters(t, ns, owner, "reg-c1", "reg-c2")
	got := s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if got.Status.SelectedClusters != 2 || got.Status.RegisteredClusters != 2 || got.Status.Phase != v1alpha1.PhaseSuccessful {
		t.Errorf("status = %+v", got.Status)
	}
	for _, typ := range []string{v1alpha1.ConditionPlacementResolved, v1alpha1.ConditionClustersRegistered} {
		s.waitCondition(t, key, typ, metav1.ConditionTrue, map[string]string{
			v1alpha1.ConditionPlacementResolved: v1alpha1.ReasonResolved, v1alpha1.ConditionClustersRegistered: v1alpha1.ReasonRegistered,
		}[typ])
	}
	if !strings.Contains(got.Status.Message, "2 clusters registered") {
		t.Errorf("status message = %q", got.Status.Message)
	}
	if len(got.Finalizers) != 1 || got.Finalizers[0] != Finalizer {
		t.Errorf("finalizers = %v", got.Finalizers)
	}
	s.waitEvent(t, key, corev1.EventTypeNormal, v1alpha1.ReasonReady)
	s.waitEvent(t, key, corev1.EventTypeNormal, "ClustersChanged")

	_, secrets := s.clusterSecrets(t, ns)
	sec := secrets["reg-c1"]
	if sec.Name != "reg-c1-application-manager-cluster-secret" || string(sec.Data["server"]) != "https://reg-c1.ocm-pull.invalid" || len(sec.Data) != 2 {
		t.Errorf("secret %s data %v", sec.Name, sec.Data)
	}
	if sec.Labels[LabelClusterName] != "reg-c1" || sec.Labels[LabelACMCluster] != "true" || sec.Labels[LabelSecretType] != SecretTypeCluster {
		t.Errorf("secret labels %v", sec.Labels)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != got.UID || !*sec.OwnerReferences[0].Controller {
		t.Errorf("secret owner references %v", sec.OwnerReferences)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GeneratorConfigMapName}}
	s.get(t, cm)
	if !maps.Equal(cm.Data, map[string]string{"apiVersion": "cluster.open-cluster-management.io/v1beta1",
		"kind": "placementdecisions", "statusListKey": "decisions", "matchKey": "clusterName"}) {
		t.Errorf("generator configmap data %v", cm.Data)
	}

	// A cluster leaves the decisions, another joins, a second PlacementDecision adds one more.
	s.decide(t, ns, "all", 1, "reg-c2", "reg-c3")
	s.decide(t, ns, "all", 2, "reg-c4", "reg-c2")
	s.waitClusters(t, ns, owner, "reg-c2", "reg-c3", "reg-c4")
	testutil.Eventually(t, "counts of three clusters", func() error {
		s.get(t, got)
		if got.Status.SelectedClusters != 3 || got.Status.RegisteredClusters != 3 {
			return fmt.Errorf("status %d selected, %d registered", got.Status.SelectedClusters, got.Status.RegisteredClusters)
		}
		return nil
	})

	// The Placement selects nothing: every secret goes, the GitOpsCluster stays Ready.
	s.decide(t, ns, "all", 1)
	s.decide(t, ns, "all", 2)
	s.waitClusters(t, ns, owner)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}

func TestCopiesManagedClusterLabels(t *testing.T) {
	s := startSuite(t)
	ns := "lbl-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.managedCluster(t, "lbl-c1", map[string]string{"env": "prod", "cloud": "aws"})
	s.decide(t, ns, "all", 1, "lbl-c1", "lbl-c2")
	s.gitOpsCluster(t, ns, "gc", "all", ns)
	s.waitClusters(t, ns, ns+"/gc", "lbl-c1", "lbl-c2")

	labelOf := func(cluster, key string) func() error {
		return func() error {
			_, secrets := s.clusterSecrets(t, ns)
			sec := secrets[cluster]
			if v := sec.Labels["env"]; v != key {
				return fmt.Errorf("secret of %s has env=%q, want %q (labels %v)", cluster, v, key, sec.Labels)
			}
			return nil
		}
	}
	testutil.Eventually(t, "labels of lbl-c1 copied", labelOf("lbl-c1", "prod"))
	testutil.Eventually(t, "lbl-c2 has no managed cluster", labelOf("lbl-c2", ""))

	mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "lbl-c1"}}
	s.update(t, mc, func() { mc.Labels["env"] = "dev" })
	testutil.Eventually(t, "changed label copied", labelOf("lbl-c1", "dev"))

	s.managedCluster(t, "lbl-c2", map[string]string{"env": "test"})
	testutil.Eventually(t, "labels of a cluster that appears later copied", labelOf("lbl-c2", "test"))
}

func TestMissingPlacementRecovers(t *testing.T) {
	s := startSuite(t)
	ns := "miss-argocd"
	s.namespace(t, ns)
	gc := s.gitOpsCluster(t, ns, "gc", "later", ns)
	key := client.ObjectKeyFromObject(gc)

	got := s.waitCondition(t, key, v1alpha1.ConditionPlacementResolved, metav1.ConditionFalse, v1alpha1.ReasonPlacementNotFound)
	s.waitCondition(t, key, v1alpha1.ConditionClustersRegistered, metav1.ConditionFalse, v1alpha1.ReasonPlacementNotResolved)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPlacementNotFound)
	if got.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(got.Status.Message, "Placement miss-argocd/later not found") {
		t.Errorf("status = %+v", got.Status)
	}
	s.waitEvent(t, key, corev1.EventTypeWarning, v1alpha1.ReasonPlacementNotFound)
	if clusters, _ := s.clusterSecrets(t, ns); len(clusters) != 0 {
		t.Errorf("secrets without a Placement: %v", clusters)
	}

	// Decisions first: nothing happens while the Placement is missing; the Placement's creation fixes it.
	s.decide(t, ns, "later", 1, "miss-c1")
	s.placement(t, ns, "later")
	s.waitClusters(t, ns, ns+"/gc", "miss-c1")
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}

func TestUnsupportedPlacementKindKeepsSecrets(t *testing.T) {
	s := startSuite(t)
	ns := "kind-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "kind-c1")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	key := client.ObjectKeyFromObject(gc)
	s.waitClusters(t, ns, ns+"/gc", "kind-c1")
	_, before := s.clusterSecrets(t, ns)

	s.update(t, gc, func() { gc.Spec.PlacementRef.Kind = "PlacementRule" })
	got := s.waitCondition(t, key, v1alpha1.ConditionPlacementResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidPlacementRef)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidPlacementRef)
	if !strings.Contains(got.Status.Message, `kind "PlacementRule" is not supported`) || got.Status.RegisteredClusters != 1 {
		t.Errorf("status = %+v", got.Status)
	}
	s.waitEvent(t, key, corev1.EventTypeWarning, v1alpha1.ReasonInvalidPlacementRef)
	_, after := s.clusterSecrets(t, ns)
	if after["kind-c1"].UID != before["kind-c1"].UID || after["kind-c1"].ResourceVersion != before["kind-c1"].ResourceVersion {
		t.Errorf("the secret changed while the Placement reference was invalid")
	}

	s.update(t, gc, func() { gc.Spec.PlacementRef.Kind = "Placement" })
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}

func TestMissingArgoNamespaceRecovers(t *testing.T) {
	s := startSuite(t)
	ns, argo := "team-a", "team-a-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "nsm-c1", "nsm-c2")
	gc := s.gitOpsCluster(t, ns, "gc", "all", argo)
	key := client.ObjectKeyFromObject(gc)

	s.waitCondition(t, key, v1alpha1.ConditionPlacementResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved)
	got := s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonArgoNamespaceNotFound)
	if !strings.Contains(got.Status.Message, "Argo CD namespace team-a-argocd not found") || got.Status.SelectedClusters != 2 {
		t.Errorf("status = %+v", got.Status)
	}
	s.waitEvent(t, key, corev1.EventTypeWarning, v1alpha1.ReasonArgoNamespaceNotFound)

	s.namespace(t, argo)
	s.waitClusters(t, argo, ns+"/gc", "nsm-c1", "nsm-c2")
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	_, secrets := s.clusterSecrets(t, argo)
	if refs := secrets["nsm-c1"].OwnerReferences; len(refs) != 0 {
		t.Errorf("a secret in another namespace has owner references %v", refs)
	}

	// Deleting it removes the secrets it owns in the other namespace, marked only by the annotation.
	s.delete(t, gc)
	s.waitGone(t, gc)
	s.waitClusters(t, argo, ns+"/gc")
}

func TestNeverTouchesForeignSecrets(t *testing.T) {
	s := startSuite(t)
	ns := "foreign-argocd"
	s.namespace(t, ns)
	// A cluster secret with the name the controller would use, a Secret of another kind with that name (outside
	// the controller's cache), and a cluster secret of another name that defines the same Argo CD cluster.
	clash := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SecretName("fs-c1"), Labels: map[string]string{LabelSecretType: SecretTypeCluster}},
		StringData: map[string]string{"name": "fs-c1", "server": "https://fs-c1.example.com", "config": `{"bearerToken":"x"}`},
	}
	hidden := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SecretName("fs-c2")},
		StringData: map[string]string{"password": "x"},
	}
	same := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-fs-c3", Labels: map[string]string{LabelSecretType: SecretTypeCluster}},
		StringData: map[string]string{"name": "fs-c3", "server": "https://fs-c3.example.com"},
	}
	for _, obj := range []*corev1.Secret{clash, hidden, same} {
		s.create(t, obj)
	}
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "fs-c1", "fs-c2", "fs-c3", "fs-c4")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	key := client.ObjectKeyFromObject(gc)

	s.waitClusters(t, ns, ns+"/gc", "fs-c4")
	got := s.waitCondition(t, key, v1alpha1.ConditionClustersRegistered, metav1.ConditionFalse, v1alpha1.ReasonNameConflict)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNameConflict)
	msg := condition(got, v1alpha1.ConditionClustersRegistered).Message
	for _, want := range []string{"1 of 4 clusters registered", "3 conflicts",
		"fs-c1: Secret foreign-argocd/fs-c1-application-manager-cluster-secret exists and is not managed by a GitOpsCluster",
		"fs-c2: Secret foreign-argocd/fs-c2-application-manager-cluster-secret exists",
		`fs-c3: Argo CD cluster "fs-c3" is already defined by Secret foreign-argocd/my-fs-c3`} {
		if !strings.Contains(msg, want) {
			t.Errorf("ClustersRegistered message %q lacks %q", msg, want)
		}
	}
	s.waitEvent(t, key, corev1.EventTypeWarning, v1alpha1.ReasonNameConflict)
	for _, obj := range []*corev1.Secret{clash, hidden, same} {
		now := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name}}
		s.get(t, now)
		if now.ResourceVersion != obj.ResourceVersion || secretOwner(now) != "" {
			t.Errorf("foreign secret %s was changed", obj.Name)
		}
	}

	// Each clash is fixed by removing the foreign Secret, including the one the controller cannot watch.
	for _, obj := range []*corev1.Secret{clash, hidden, same} {
		s.delete(t, obj)
	}
	s.waitClusters(t, ns, ns+"/gc", "fs-c1", "fs-c2", "fs-c3", "fs-c4")
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}

func condition(gc *v1alpha1.GitOpsCluster, typ string) metav1.Condition {
	for _, c := range gc.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func TestDeletionRemovesWhatItCreated(t *testing.T) {
	s := startSuite(t)
	ns := "del-argocd"
	s.namespace(t, ns)
	userSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user-cluster", Labels: map[string]string{LabelSecretType: SecretTypeCluster}},
		StringData: map[string]string{"name": "user-cluster", "server": "https://user.example.com"},
	}
	s.create(t, userSecret)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "del-c1", "del-c2")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	s.waitClusters(t, ns, ns+"/gc", "del-c1", "del-c2")
	s.waitCondition(t, client.ObjectKeyFromObject(gc), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	s.delete(t, gc)
	s.waitGone(t, gc)
	if clusters, _ := s.clusterSecrets(t, ns); strings.Join(clusters, ",") != "user-cluster" {
		t.Errorf("cluster secrets after deletion: %v, want only the user's", clusters)
	}
	s.waitGone(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GeneratorConfigMapName}})
	s.get(t, userSecret)
}

func TestSharedClustersAreHandedOver(t *testing.T) {
	s := startSuite(t)
	ns := "share-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "pa")
	s.placement(t, ns, "pb")
	s.decide(t, ns, "pa", 1, "sh-c1", "sh-c2")
	s.decide(t, ns, "pb", 1, "sh-c2", "sh-c3")
	a := s.gitOpsCluster(t, ns, "a", "pa", ns)
	s.waitClusters(t, ns, ns+"/a", "sh-c1", "sh-c2")
	b := s.gitOpsCluster(t, ns, "b", "pb", ns)
	s.waitClusters(t, ns, ns+"/b", "sh-c3")
	got := s.waitCondition(t, client.ObjectKeyFromObject(b), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if got.Status.RegisteredClusters != 2 || !strings.Contains(condition(got, v1alpha1.ConditionClustersRegistered).Message, "sh-c2 (GitOpsCluster share-argocd/a)") {
		t.Errorf("b's status = %+v", got.Status)
	}
	_, before := s.clusterSecrets(t, ns)

	// a no longer selects sh-c2: b takes the secret over, Argo CD never loses the cluster.
	s.decide(t, ns, "pa", 1, "sh-c1")
	s.waitClusters(t, ns, ns+"/b", "sh-c2", "sh-c3")
	_, after := s.clusterSecrets(t, ns)
	if after["sh-c2"].UID != before["sh-c2"].UID {
		t.Errorf("the secret of sh-c2 was recreated instead of handed over")
	}
	if refs := after["sh-c2"].OwnerReferences; len(refs) != 1 || refs[0].UID != b.UID {
		t.Errorf("owner references after hand-over: %v", refs)
	}

	// a selects sh-c2 again and is deleted: its own secret goes, b's stays, the shared ConfigMap stays.
	s.decide(t, ns, "pa", 1, "sh-c1", "sh-c2")
	s.delete(t, a)
	s.waitGone(t, a)
	s.waitClusters(t, ns, ns+"/a")
	s.waitClusters(t, ns, ns+"/b", "sh-c2", "sh-c3")
	s.get(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GeneratorConfigMapName}})
}

func TestDeletionHandsOverSharedSecrets(t *testing.T) {
	s := startSuite(t)
	ns := "hand-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "pa")
	s.placement(t, ns, "pb")
	s.decide(t, ns, "pa", 1, "ho-c1")
	s.decide(t, ns, "pb", 1, "ho-c1")
	a := s.gitOpsCluster(t, ns, "a", "pa", ns)
	s.waitClusters(t, ns, ns+"/a", "ho-c1")
	b := s.gitOpsCluster(t, ns, "b", "pb", ns)
	s.waitCondition(t, client.ObjectKeyFromObject(b), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	_, before := s.clusterSecrets(t, ns)

	s.delete(t, a)
	s.waitGone(t, a)
	s.waitClusters(t, ns, ns+"/b", "ho-c1")
	_, after := s.clusterSecrets(t, ns)
	if after["ho-c1"].UID != before["ho-c1"].UID {
		t.Errorf("the secret of ho-c1 was recreated instead of handed over on deletion")
	}
}

func TestGeneratorConfigMapOfTheUser(t *testing.T) {
	s := startSuite(t)
	ns := "ucm-argocd"
	s.namespace(t, ns)
	user := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GeneratorConfigMapName},
		Data:       map[string]string{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "placementdecisions", "statusListKey": "decisions", "matchKey": "name"},
	}
	s.create(t, user)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "ucm-c1")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	key := client.ObjectKeyFromObject(gc)

	s.waitCondition(t, key, v1alpha1.ConditionClustersRegistered, metav1.ConditionTrue, v1alpha1.ReasonRegistered)
	got := s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonGeneratorConfigMapConflict)
	if !strings.Contains(got.Status.Message, "is not managed by argocd-pull") {
		t.Errorf("status message %q", got.Status.Message)
	}
	rv := user.ResourceVersion
	s.get(t, user)
	if user.ResourceVersion != rv {
		t.Errorf("the user's ConfigMap was changed")
	}

	s.update(t, user, func() { user.Data["matchKey"] = "clusterName" })
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	rv = user.ResourceVersion

	s.delete(t, gc)
	s.waitGone(t, gc)
	s.get(t, user)
	if user.ResourceVersion != rv {
		t.Errorf("the user's ConfigMap was changed or deleted with the GitOpsCluster")
	}
}

func TestNoWritesAtRest(t *testing.T) {
	s := startSuite(t)
	ns := "rest-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.managedCluster(t, "rest-c1", map[string]string{"env": "prod"})
	s.decide(t, ns, "all", 1, "rest-c1", "rest-c2")
	gc := s.gitOpsCluster(t, ns, "gc", "all", ns)
	key := client.ObjectKeyFromObject(gc)
	s.waitClusters(t, ns, ns+"/gc", "rest-c1", "rest-c2")
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	testutil.Eventually(t, "labels copied", func() error {
		if _, secrets := s.clusterSecrets(t, ns); secrets["rest-c1"].Labels["env"] != "prod" {
			return fmt.Errorf("labels %v", secrets["rest-c1"].Labels)
		}
		return nil
	})

	versions := func() map[string]string {
		v := map[string]string{}
		s.get(t, gc)
		v["gitopscluster"] = gc.ResourceVersion
		_, secrets := s.clusterSecrets(t, ns)
		for c, sec := range secrets {
			v[c] = sec.ResourceVersion
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GeneratorConfigMapName}}
		s.get(t, cm)
		v["configmap"] = cm.ResourceVersion
		return v
	}
	before := versions()
	for range 3 {
		res, err := s.rec.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		if err != nil || res.RequeueAfter != 0 {
			t.Fatalf("reconcile at rest = %+v, %v", res, err)
		}
	}
	if after := versions(); !maps.Equal(before, after) {
		t.Errorf("reconciles at rest wrote: before %v, after %v", before, after)
	}
}

func TestIgnoredFieldsAreReported(t *testing.T) {
	s := startSuite(t)
	ns := "compat-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "compat-c1")
	// A GitOpsCluster as ACM users write it, with fields the pull model does not act on.
	obj := &v1alpha1.GitOpsCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gc"}}
	raw := `{"apiVersion":"apps.open-cluster-management.io/v1alpha1","kind":"GitOpsCluster",
		"metadata":{"namespace":"compat-argocd","name":"gc"},
		"spec":{"argoServer":{"cluster":"local-cluster","argoNamespace":"compat-argocd"},
		        "placementRef":{"kind":"Placement","apiVersion":"cluster.open-cluster-management.io/v1beta1","name":"all"},
		        "managedServiceAccountRef":"application-manager",
		        "gitopsAddon":{"enabled":false,"argoCDAgent":{"enabled":false}}}}`
	if err := s.c.Patch(context.Background(), obj, client.RawPatch(types.ApplyPatchType, []byte(raw)), client.FieldOwner("test"), client.ForceOwnership); err != nil {
		t.Fatalf("apply gitopscluster: %v", err)
	}
	got := s.waitCondition(t, client.ObjectKeyFromObject(obj), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if want := "ignored in the pull model: spec.argoServer.cluster, spec.managedServiceAccountRef, spec.gitopsAddon"; !strings.Contains(got.Status.Message, want) {
		t.Errorf("status message %q lacks %q", got.Status.Message, want)
	}
	if string(got.Spec.GitOpsAddon.Raw) != `{"argoCDAgent":{"enabled":false},"enabled":false}` {
		t.Errorf("spec.gitopsAddon was not kept: %s", got.Spec.GitOpsAddon.Raw)
	}
	s.waitClusters(t, ns, ns+"/gc", "compat-c1")
}

func TestPlacementDecisionOfAnotherPlacementIsIgnored(t *testing.T) {
	s := startSuite(t)
	ns := "other-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "mine")
	s.placement(t, ns, "theirs")
	s.decide(t, ns, "mine", 1, "op-c1")
	s.decide(t, ns, "theirs", 1, "op-c2")
	unlabelled := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stray"}}
	s.create(t, unlabelled)
	gc := s.gitOpsCluster(t, ns, "gc", "mine", ns)
	s.waitCondition(t, client.ObjectKeyFromObject(gc), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if clusters := s.ownedClusters(t, ns, ns+"/gc"); strings.Join(clusters, ",") != "op-c1" {
		t.Errorf("clusters %v, want op-c1 only", clusters)
	}
}
