package gitopscluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
)

func TestValidatePlacementRef(t *testing.T) {
	tests := []struct {
		name string
		ref  *corev1.ObjectReference
		want string // a fragment of the problem, "" for none
	}{
		{"placement", &corev1.ObjectReference{Kind: "Placement", Name: "p"}, ""},
		{"with apiVersion and namespace", &corev1.ObjectReference{Kind: "Placement", Name: "p",
			APIVersion: "cluster.open-cluster-management.io/v1beta1", Namespace: "ns"}, ""},
		{"missing", nil, "not set"},
		{"no name", &corev1.ObjectReference{Kind: "Placement"}, "name is not set"},
		{"placementrule", &corev1.ObjectReference{Kind: "PlacementRule", Name: "p"}, `kind "PlacementRule" is not supported`},
		{"no kind", &corev1.ObjectReference{Name: "p"}, `kind "" is not supported`},
		{"other group", &corev1.ObjectReference{Kind: "Placement", Name: "p", APIVersion: "apps.open-cluster-management.io/v1"}, "is not in group"},
		{"other namespace", &corev1.ObjectReference{Kind: "Placement", Name: "p", Namespace: "elsewhere"}, "must be in the same namespace"},
	}
	for _, tt := range tests {
		got := validatePlacementRef(tt.ref, "ns")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: validatePlacementRef = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDecisionClusters(t *testing.T) {
	decision := func(clusters ...string) clusterv1beta1.PlacementDecision {
		var d clusterv1beta1.PlacementDecision
		for _, c := range clusters {
			d.Status.Decisions = append(d.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: c})
		}
		return d
	}
	tests := []struct {
		name      string
		decisions []clusterv1beta1.PlacementDecision
		want      []string
	}{
		{"none", nil, nil},
		{"empty status", []clusterv1beta1.PlacementDecision{decision()}, nil},
		{"sorted and distinct across decisions", []clusterv1beta1.PlacementDecision{decision("c3", "c1"), decision("c1", "c2")}, []string{"c1", "c2", "c3"}},
		{"blank names skipped", []clusterv1beta1.PlacementDecision{decision("", " ", "c1")}, []string{"c1"}},
	}
	for _, tt := range tests {
		if got := decisionClusters(tt.decisions); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: decisionClusters = %v, want %v", tt.name, got, tt.want)
		}
	}
}
