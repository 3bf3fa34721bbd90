package gitopscluster

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
)

func resolved(clusters ...string) placementResult {
	return placementResult{resolved: true, placement: "argocd/all", clusters: clusters, decisions: 1}
}

func TestComputeStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	type want struct {
		placement, registered, ready string // "Status/Reason"
		message                      string // fragment of the Ready message
		selected, registeredN        int32
		phase                        string
	}
	tests := []struct {
		name string
		obs  observation
		want want
	}{
		{
			name: "all registered",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1", "c2"),
				registration: registration{registered: 2, created: 2}, configMap: configMapResult{ok: true}},
			want: want{"True/Resolved", "True/Registered", "True/Ready", "2 clusters registered with Argo CD in namespace argocd", 2, 2, "successful"},
		},
		{
			name: "ignored fields are named",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1"),
				registration: registration{registered: 1}, configMap: configMapResult{ok: true}, ignored: []string{"spec.gitopsAddon"}},
			want: want{"True/Resolved", "True/Registered", "True/Ready", "ignored in the pull model: spec.gitopsAddon", 1, 1, "successful"},
		},
		{
			name: "invalid placement reference keeps the secrets",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true,
				placement:    placementResult{reason: v1alpha1.ReasonInvalidPlacementRef, message: `spec.placementRef.kind "PlacementRule" is not supported`},
				registration: registration{skipped: true, kept: 3}, configMap: configMapResult{ok: true}},
			want: want{"False/InvalidPlacementRef", "False/PlacementNotResolved", "False/InvalidPlacementRef", "PlacementRule", 0, 3, "failed"},
		},
		{
			name: "placement not found",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true,
				placement:    placementResult{reason: v1alpha1.ReasonPlacementNotFound, message: "Placement argocd/all not found"},
				registration: registration{skipped: true}, configMap: configMapResult{ok: true}},
			want: want{"False/PlacementNotFound", "False/PlacementNotResolved", "False/PlacementNotFound", "Placement argocd/all not found", 0, 0, "failed"},
		},
		{
			name: "argo cd namespace missing",
			obs: observation{argoNamespace: "nowhere", placement: resolved("c1"),
				registration: registration{skipped: true}},
			want: want{"True/Resolved", "False/ArgoNamespaceNotFound", "False/ArgoNamespaceNotFound", "Argo CD namespace nowhere not found", 1, 0, "failed"},
		},
		{
			name: "name conflict",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1", "c2"),
				registration: registration{registered: 1, conflicts: []string{"c1: Secret argocd/x exists and is not managed by a GitOpsCluster"}},
				configMap:    configMapResult{ok: true}},
			want: want{"True/Resolved", "False/NameConflict", "False/NameConflict", "1 of 2 clusters registered in Argo CD namespace argocd; 1 conflicts: c1: Secret argocd/x", 2, 1, "failed"},
		},
		{
			name: "write failure",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1"),
				registration: registration{failures: []string{"c1: boom"}}, configMap: configMapResult{ok: true}},
			want: want{"True/Resolved", "False/RegistrationFailed", "False/RegistrationFailed", "1 failed: c1: boom", 1, 0, "failed"},
		},
		{
			name: "shared clusters count as registered",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1"),
				registration: registration{registered: 1, shared: []string{"c1 (GitOpsCluster argocd/other)"}}, configMap: configMapResult{ok: true}},
			want: want{"True/Resolved", "True/Registered", "True/Ready", "1 clusters registered", 1, 1, "successful"},
		},
		{
			name: "foreign generator configmap",
			obs: observation{argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1"),
				registration: registration{registered: 1},
				configMap:    configMapResult{reason: v1alpha1.ReasonGeneratorConfigMapConflict, message: "ConfigMap argocd/ocm-placement-generator is not managed"}},
			want: want{"True/Resolved", "True/Registered", "False/GeneratorConfigMapConflict", "is not managed", 1, 1, "failed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.obs.generation = 7
			st, changed := computeStatus(v1alpha1.GitOpsClusterStatus{}, tt.obs, now)
			if !changed || st.LastUpdateTime == nil || !st.LastUpdateTime.Equal(&now) {
				t.Errorf("changed = %v, lastUpdateTime = %v", changed, st.LastUpdateTime)
			}
			for typ, want := range map[string]string{
				v1alpha1.ConditionPlacementResolved: tt.want.placement, v1alpha1.ConditionClustersRegistered: tt.want.registered, v1alpha1.ConditionReady: tt.want.ready,
			} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				if got := string(c.Status) + "/" + c.Reason; got != want {
					t.Errorf("%s = %s (%s), want %s", typ, got, c.Message, want)
				}
				if c.ObservedGeneration != 7 || c.Message == "" {
					t.Errorf("%s: observedGeneration %d, message %q", typ, c.ObservedGeneration, c.Message)
				}
			}
			ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
			if !strings.Contains(ready.Message, tt.want.message) || st.Message != ready.Message {
				t.Errorf("Ready message = %q, status message %q, want it to contain %q", ready.Message, st.Message, tt.want.message)
			}
			if st.SelectedClusters != tt.want.selected || st.RegisteredClusters != tt.want.registeredN || st.Phase != tt.want.phase || st.ObservedGeneration != 7 {
				t.Errorf("selected %d registered %d phase %q generation %d, want %d %d %q 7",
					st.SelectedClusters, st.RegisteredClusters, st.Phase, st.ObservedGeneration, tt.want.selected, tt.want.registeredN, tt.want.phase)
			}
		})
	}
}

func TestComputeStatusStable(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	good := observation{generation: 1, argoNamespace: "argocd", argoNamespaceFound: true, placement: resolved("c1"),
		registration: registration{registered: 1}, configMap: configMapResult{ok: true}}
	first, _ := computeStatus(v1alpha1.GitOpsClusterStatus{}, good, t0)

	again, changed := computeStatus(first, good, t1)
	if changed || !reflect.DeepEqual(again, first) {
		t.Errorf("same observation changed the status: %+v", again)
	}

	more := good
	more.placement = resolved("c1", "c2")
	more.registration = registration{registered: 2, created: 1}
	next, changed := computeStatus(first, more, t1)
	if !changed || !next.LastUpdateTime.Equal(&t1) {
		t.Errorf("changed = %v, lastUpdateTime = %v", changed, next.LastUpdateTime)
	}
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionReady); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("Ready stayed True but its transition time moved to %v", c.LastTransitionTime)
	}

	bad := good
	bad.placement = placementResult{reason: v1alpha1.ReasonPlacementNotFound, message: "gone"}
	failed, _ := computeStatus(first, bad, t1)
	if c := meta.FindStatusCondition(failed.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("Ready = %+v, want False since %v", c, t1)
	}

	foreign := first.DeepCopy()
	foreign.Conditions = append(foreign.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "X"})
	cleaned, _ := computeStatus(*foreign, good, t1)
	if meta.FindStatusCondition(cleaned.Conditions, "Other") != nil {
		t.Errorf("a condition the controller does not own was kept")
	}
}

func TestStatusEvents(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: reason + " message"}}
	}
	tests := []struct {
		name      string
		old, next []metav1.Condition
		reg       registration
		want      []string // "Type/Reason/note fragment"
	}{
		{"first ready", nil, cond(metav1.ConditionTrue, "Ready"), registration{}, []string{"Normal/Ready/Ready message"}},
		{"steady", cond(metav1.ConditionTrue, "Ready"), cond(metav1.ConditionTrue, "Ready"), registration{}, nil},
		{"failure", cond(metav1.ConditionTrue, "Ready"), cond(metav1.ConditionFalse, "PlacementNotFound"), registration{}, []string{"Warning/PlacementNotFound/PlacementNotFound message"}},
		{"another failure", cond(metav1.ConditionFalse, "PlacementNotFound"), cond(metav1.ConditionFalse, "NameConflict"), registration{}, []string{"Warning/NameConflict/"}},
		{"same failure again", cond(metav1.ConditionFalse, "NameConflict"), cond(metav1.ConditionFalse, "NameConflict"), registration{}, nil},
		{"secrets written", cond(metav1.ConditionTrue, "Ready"), cond(metav1.ConditionTrue, "Ready"), registration{created: 2, removed: 1},
			[]string{"Normal/ClustersChanged/Cluster secrets: registered 2, removed 1"}},
	}
	for _, tt := range tests {
		got := statusEvents(tt.old, tt.next, tt.reg)
		if len(got) != len(tt.want) {
			t.Errorf("%s: events = %+v, want %v", tt.name, got, tt.want)
			continue
		}
		for i, e := range got {
			parts := strings.SplitN(tt.want[i], "/", 3)
			if e.eventType != parts[0] || e.reason != parts[1] || !strings.Contains(e.note, parts[2]) {
				t.Errorf("%s: event %d = %+v, want %s", tt.name, i, e, tt.want[i])
			}
		}
	}
}

func TestIgnoredFields(t *testing.T) {
	yes, no := true, false
	spec := v1alpha1.GitOpsClusterSpec{
		ArgoServer:                v1alpha1.ArgoServerSpec{Cluster: "local-cluster", ArgoNamespace: "argocd"},
		ManagedServiceAccountRef:  "msa",
		CreateBlankClusterSecrets: &no,
		CreatePolicyTemplate:      &yes,
		GitOpsAddon:               &apiextensionsv1.JSON{Raw: []byte(`{"enabled":true}`)},
		ArgoCDAgentAddon:          &v1alpha1.ArgoCDAgentAddonSpec{PrincipalServerAddress: "console", Mode: "managed", AgentImage: "x"},
	}
	want := []string{"spec.argoServer.cluster", "spec.managedServiceAccountRef", "spec.createBlankClusterSecrets",
		"spec.createPolicyTemplate", "spec.gitopsAddon", "spec.argoCDAgentAddon.mode", "spec.argoCDAgentAddon.agentImage"}
	if got := ignoredFields(&spec); !reflect.DeepEqual(got, want) {
		t.Errorf("ignoredFields = %v, want %v", got, want)
	}
	plain := v1alpha1.GitOpsClusterSpec{CreateBlankClusterSecrets: &yes}
	if got := ignoredFields(&plain); got != nil {
		t.Errorf("ignoredFields of a plain pull-model spec = %v", got)
	}
}

func TestSummarize(t *testing.T) {
	if got := summarize([]string{"a", "b"}); got != "a; b" {
		t.Errorf("summarize = %q", got)
	}
	if got := summarize([]string{"1", "2", "3", "4", "5", "6", "7"}); got != "1; 2; 3; 4; 5; and 2 more" {
		t.Errorf("summarize = %q", got)
	}
}

func TestResult(t *testing.T) {
	good := observation{argoNamespaceFound: true, placement: resolved("c1"), configMap: configMapResult{ok: true}}
	tests := []struct {
		name         string
		change       func(*observation)
		wantErr      bool
		wantTerminal bool
		wantRequeue  bool
	}{
		{"ready", func(*observation) {}, false, false, false},
		{"write failure retries with backoff", func(o *observation) { o.registration.failures = []string{"c1: boom"} }, true, false, false},
		{"configmap write failure retries", func(o *observation) {
			o.configMap = configMapResult{reason: v1alpha1.ReasonGeneratorConfigMapFailed, message: "boom"}
		}, true, false, false},
		{"clash outside the cache is checked again", func(o *observation) {
			o.registration.conflicts = []string{"c1"}
			o.registration.uncachedConflict = true
		}, false, false, true},
		{"placement not found waits for its watch", func(o *observation) { o.placement = placementResult{message: "gone"} }, true, true, false},
		{"namespace missing waits for its watch", func(o *observation) { o.argoNamespaceFound = false }, true, true, false},
		{"watched clash waits for its watch", func(o *observation) { o.registration.conflicts = []string{"c1"} }, true, true, false},
		{"foreign configmap waits for its watch", func(o *observation) {
			o.configMap = configMapResult{reason: v1alpha1.ReasonGeneratorConfigMapConflict, message: "foreign"}
		}, true, true, false},
		{"console certificates that failed are retried", func(o *observation) {
			o.console = consoleResult{requested: true, reason: v1alpha1.ReasonConsoleCertificatesFailed, message: "boom"}
		}, true, false, false},
		{"console without an address waits for a spec change", func(o *observation) {
			o.console = consoleResult{requested: true, reason: v1alpha1.ReasonConsoleNotConfigured, message: "no address"}
		}, true, true, false},
		{"console certificates are renewed in time", func(o *observation) {
			o.console = consoleResult{requested: true, ok: true}
			o.consoleRenewAt = time.Now().Add(time.Minute + 30*time.Second)
		}, false, false, false},
	}
	for _, tt := range tests {
		obs := good
		tt.change(&obs)
		res, err := result(obs, time.Minute)
		if (err != nil) != tt.wantErr || errors.Is(err, reconcile.TerminalError(nil)) != tt.wantTerminal || (res.RequeueAfter == time.Minute) != tt.wantRequeue {
			t.Errorf("%s: result = %+v, %v", tt.name, res, err)
		}
	}
}
