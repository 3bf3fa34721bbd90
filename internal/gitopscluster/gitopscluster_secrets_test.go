package gitopscluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

func testGitOpsCluster(namespace, name string) *v1alpha1.GitOpsCluster {
	return &v1alpha1.GitOpsCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
		Spec: v1alpha1.GitOpsClusterSpec{
			ArgoServer:   v1alpha1.ArgoServerSpec{ArgoNamespace: "argocd"},
			PlacementRef: &corev1.ObjectReference{Kind: "Placement", Name: "all"},
		},
	}
}

func TestSecretName(t *testing.T) {
	long := strings.Repeat("a", 240)
	tests := []struct {
		cluster string
		want    string
	}{
		{"cluster1", "cluster1-application-manager-cluster-secret"},
		{"a.b", "a.b-application-manager-cluster-secret"},
	}
	for _, tt := range tests {
		if got := SecretName(tt.cluster); got != tt.want {
			t.Errorf("SecretName(%q) = %q, want %q", tt.cluster, got, tt.want)
		}
	}
	got := SecretName(long)
	if len(got) > validation.DNS1123SubdomainMaxLength || !strings.HasSuffix(got, secretNameSuffix) {
		t.Errorf("SecretName(240 chars) = %q (%d chars), want at most %d chars ending in %s", got, len(got), validation.DNS1123SubdomainMaxLength, secretNameSuffix)
	}
	if other := SecretName(long[:239] + "b"); other == got {
		t.Errorf("SecretName of two long names that differ at the end are both %q", got)
	}
}

func TestDesiredSecret(t *testing.T) {
	gc := testGitOpsCluster("argocd", "gc")
	tests := []struct {
		name          string
		gc            *v1alpha1.GitOpsCluster
		cluster       string
		clusterLabels map[string]string
		wantLabels    map[string]string
		wantOwnerRef  bool
	}{
		{
			name: "same namespace: owner reference and ACM labels", gc: gc, cluster: "c1",
			wantLabels: map[string]string{
				LabelSecretType: SecretTypeCluster, LabelACMCluster: "true", LabelClusterName: "c1",
				LabelClusterServer: "c1." + argocd.ClusterServerDomain, LabelManagedBy: ManagedBy,
			},
			wantOwnerRef: true,
		},
		{
			name: "managed cluster labels are copied, the controller's win", gc: gc, cluster: "c1",
			clusterLabels: map[string]string{"env": "prod", LabelClusterName: "spoofed", LabelSecretType: "repository"},
			wantLabels: map[string]string{
				"env": "prod", LabelSecretType: SecretTypeCluster, LabelACMCluster: "true", LabelClusterName: "c1",
				LabelClusterServer: "c1." + argocd.ClusterServerDomain, LabelManagedBy: ManagedBy,
			},
			wantOwnerRef: true,
		},
		{
			name: "other namespace: no owner reference", gc: testGitOpsCluster("team", "gc"), cluster: "c1",
			wantLabels: map[string]string{
				LabelSecretType: SecretTypeCluster, LabelACMCluster: "true", LabelClusterName: "c1",
				LabelClusterServer: "c1." + argocd.ClusterServerDomain, LabelManagedBy: ManagedBy,
			},
		},
		{
			name: "server label left out when the host is too long for a label", gc: gc, cluster: strings.Repeat("x", 60),
			wantLabels: map[string]string{
				LabelSecretType: SecretTypeCluster, LabelACMCluster: "true", LabelClusterName: strings.Repeat("x", 60), LabelManagedBy: ManagedBy,
			},
			wantOwnerRef: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := desiredSecret(tt.gc, "argocd", tt.cluster, tt.clusterLabels)
			if s.Namespace != "argocd" || s.Name != SecretName(tt.cluster) {
				t.Errorf("secret is %s/%s", s.Namespace, s.Name)
			}
			if !reflect.DeepEqual(s.Labels, tt.wantLabels) {
				t.Errorf("labels = %v, want %v", s.Labels, tt.wantLabels)
			}
			if got := string(s.Data["name"]); got != tt.cluster {
				t.Errorf("data.name = %q", got)
			}
			if got := string(s.Data["server"]); got != "https://"+tt.cluster+".ocm-pull.invalid" {
				t.Errorf("data.server = %q", got)
			}
			if len(s.Data) != 2 {
				t.Errorf("data has %d keys, want name and server only (no credentials)", len(s.Data))
			}
			if got := s.Annotations[AnnotationOwner]; got != tt.gc.Namespace+"/gc" {
				t.Errorf("owner annotation = %q", got)
			}
			if hasRef := len(s.OwnerReferences) == 1; hasRef != tt.wantOwnerRef {
				t.Fatalf("owner references = %v, want one: %v", s.OwnerReferences, tt.wantOwnerRef)
			}
			if tt.wantOwnerRef {
				ref := s.OwnerReferences[0]
				if ref.UID != tt.gc.UID || ref.Kind != "GitOpsCluster" || ref.APIVersion != "apps.open-cluster-management.io/v1alpha1" || !*ref.Controller {
					t.Errorf("owner reference = %+v", ref)
				}
			}
			if tt.clusterLabels != nil && tt.clusterLabels[LabelClusterName] != "spoofed" {
				t.Errorf("desiredSecret changed the managed cluster's labels: %v", tt.clusterLabels)
			}
		})
	}
}

func TestSecretUpToDate(t *testing.T) {
	gc := testGitOpsCluster("argocd", "gc")
	desired := desiredSecret(gc, "argocd", "c1", nil)
	tests := []struct {
		name   string
		change func(s *corev1.Secret)
		want   bool
	}{
		{"identical", func(*corev1.Secret) {}, true},
		{"other annotations are kept", func(s *corev1.Secret) { s.Annotations["argocd.argoproj.io/refresh"] = "x" }, true},
		{"extra label", func(s *corev1.Secret) { s.Labels["extra"] = "1" }, false},
		{"server changed", func(s *corev1.Secret) { s.Data["server"] = []byte("https://real") }, false},
		{"credentials added", func(s *corev1.Secret) { s.Data["config"] = []byte("{}") }, false},
		{"owned by a recreated gitopscluster", func(s *corev1.Secret) { s.OwnerReferences[0].UID = "old" }, false},
		{"other owner", func(s *corev1.Secret) { s.Annotations[AnnotationOwner] = "argocd/other" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := desired.DeepCopy()
			tt.change(current)
			if got := secretUpToDate(current, desired); got != tt.want {
				t.Errorf("secretUpToDate = %v, want %v", got, tt.want)
			}
			next := withDesired(current, desired)
			if !secretUpToDate(next, desired) {
				t.Errorf("withDesired did not bring the secret up to date: %+v", next)
			}
			if v, ok := current.Annotations["argocd.argoproj.io/refresh"]; ok && next.Annotations["argocd.argoproj.io/refresh"] != v {
				t.Errorf("withDesired dropped another annotation")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	gc := testGitOpsCluster("argocd", "gc")
	desired := desiredSecret(gc, "argocd", "c1", nil)
	withOwner := func(owner string) *corev1.Secret {
		s := desired.DeepCopy()
		s.Annotations = map[string]string{}
		if owner != "" {
			s.Annotations[AnnotationOwner] = owner
		}
		return s
	}
	stale := desired.DeepCopy()
	stale.Data["server"] = []byte("https://old")
	exists := func(key string) bool { return key == "argocd/live" }
	tests := []struct {
		name    string
		current *corev1.Secret
		want    action
	}{
		{"missing", nil, actCreate},
		{"ours and current", desired.DeepCopy(), actUpToDate},
		{"ours and stale", stale, actUpdate},
		{"another live gitopscluster's", withOwner("argocd/live"), actShared},
		{"a deleted gitopscluster's is adopted", withOwner("argocd/gone"), actUpdate},
		{"nobody's: a conflict", withOwner(""), actConflict},
	}
	for _, tt := range tests {
		if got := classify(tt.current, desired, exists); got != tt.want {
			t.Errorf("%s: classify = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPlanSecrets(t *testing.T) {
	gc := testGitOpsCluster("argocd", "gc")
	other := testGitOpsCluster("argocd", "other")
	ours := func(cluster string) corev1.Secret { return *desiredSecret(gc, "argocd", cluster, nil) }
	theirs := func(cluster string) corev1.Secret { return *desiredSecret(other, "argocd", cluster, nil) }
	foreign := func(name, cluster string) corev1.Secret {
		return corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: name, Labels: map[string]string{LabelSecretType: SecretTypeCluster}},
			Data:       map[string][]byte{"name": []byte(cluster), "server": []byte("https://" + cluster)},
		}
	}
	elsewhere := *desiredSecret(gc, "old-argocd", "c1", nil)
	stale := ours("c2")
	stale.Labels["gone"] = "1"
	exists := func(key string) bool { return key == "argocd/other" }

	tests := []struct {
		name          string
		clusters      []string
		existing      []corev1.Secret
		owned         []corev1.Secret
		successors    map[string]*v1alpha1.GitOpsCluster
		wantCreate    []string
		wantUpdate    []string
		wantRemove    []string
		wantHandover  []string
		wantUpToDate  int
		wantShared    int
		wantConflicts []string
	}{
		{
			name: "new clusters are created", clusters: []string{"c1", "c2"},
			wantCreate: []string{"c1", "c2"},
		},
		{
			name: "current, stale and departed secrets", clusters: []string{"c1", "c2"},
			existing: []corev1.Secret{ours("c1"), stale, ours("c3")}, owned: []corev1.Secret{ours("c1"), stale, ours("c3")},
			wantUpToDate: 1, wantUpdate: []string{"c2"}, wantRemove: []string{"c3"},
		},
		{
			name: "a departed cluster another gitopscluster selects is handed over", clusters: nil,
			existing: []corev1.Secret{ours("c1")}, owned: []corev1.Secret{ours("c1")},
			successors:   map[string]*v1alpha1.GitOpsCluster{"c1": other},
			wantHandover: []string{"c1"},
		},
		{
			name: "a secret left in the old argo cd namespace is removed", clusters: []string{"c1"},
			owned:      []corev1.Secret{elsewhere},
			successors: map[string]*v1alpha1.GitOpsCluster{"c1": other},
			wantCreate: []string{"c1"}, wantRemove: []string{"c1"},
		},
		{
			name: "another gitopscluster's secret is shared, never changed", clusters: []string{"c1"},
			existing:   []corev1.Secret{theirs("c1")},
			wantShared: 1,
		},
		{
			name: "a foreign secret with the name is a conflict", clusters: []string{"c1", "c2"},
			existing:      []corev1.Secret{foreign(SecretName("c1"), "c1")},
			wantCreate:    []string{"c2"},
			wantConflicts: []string{"c1: Secret argocd/" + SecretName("c1") + " exists"},
		},
		{
			name: "a foreign secret defining the cluster name is a conflict and ours is kept", clusters: []string{"c1"},
			existing:      []corev1.Secret{foreign("mine", "c1"), ours("c1")},
			owned:         []corev1.Secret{ours("c1")},
			wantConflicts: []string{`c1: Argo CD cluster "c1" is already defined by Secret argocd/mine`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planSecrets(planInput{
				gc: gc, argoNamespace: "argocd", clusters: tt.clusters, existing: tt.existing, owned: tt.owned,
				ownerExists: exists, successors: tt.successors,
			})
			var create, update, remove, handover []string
			for _, s := range p.create {
				create = append(create, secretCluster(s))
			}
			for _, c := range p.update {
				update = append(update, secretCluster(c.next))
				if !secretUpToDate(c.next, desiredSecret(gc, "argocd", secretCluster(c.next), nil)) {
					t.Errorf("update of %s does not reach the desired secret", secretCluster(c.next))
				}
			}
			for _, s := range p.remove {
				remove = append(remove, secretCluster(s))
			}
			for _, c := range p.handover {
				handover = append(handover, secretCluster(c.next))
				if secretOwner(c.next) != "argocd/other" || c.next.OwnerReferences[0].UID != other.UID {
					t.Errorf("handover of %s goes to %s %v", secretCluster(c.next), secretOwner(c.next), c.next.OwnerReferences)
				}
			}
			for _, pair := range []struct {
				what      string
				got, want []string
			}{{"create", create, tt.wantCreate}, {"update", update, tt.wantUpdate}, {"remove", remove, tt.wantRemove}, {"handover", handover, tt.wantHandover}} {
				if !reflect.DeepEqual(pair.got, pair.want) {
					t.Errorf("%s = %v, want %v", pair.what, pair.got, pair.want)
				}
			}
			if p.upToDate != tt.wantUpToDate || len(p.shared) != tt.wantShared {
				t.Errorf("upToDate %d shared %v, want %d and %d", p.upToDate, p.shared, tt.wantUpToDate, tt.wantShared)
			}
			if len(p.conflicts) != len(tt.wantConflicts) {
				t.Fatalf("conflicts = %v, want %v", p.conflicts, tt.wantConflicts)
			}
			for i, want := range tt.wantConflicts {
				if !strings.HasPrefix(p.conflicts[i], want) {
					t.Errorf("conflict %d = %q, want it to start with %q", i, p.conflicts[i], want)
				}
			}
		})
	}
}
