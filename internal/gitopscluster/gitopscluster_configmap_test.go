package gitopscluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestGeneratorConfigMapOK(t *testing.T) {
	tests := []struct {
		name string
		data map[string]string
		want bool
	}{
		{"as created", generatorData(), true},
		{"extra keys do not matter", map[string]string{"apiVersion": "cluster.open-cluster-management.io/v1beta1",
			"kind": "placementdecisions", "statusListKey": "decisions", "matchKey": "clusterName", "note": "x"}, true},
		{"other matchKey", map[string]string{"apiVersion": "cluster.open-cluster-management.io/v1beta1",
			"kind": "placementdecisions", "statusListKey": "decisions", "matchKey": "name"}, false},
		{"placementrules", map[string]string{"apiVersion": "apps.open-cluster-management.io/v1",
			"kind": "placementrules", "statusListKey": "decisions", "matchKey": "clusterName"}, false},
		{"empty", nil, false},
	}
	for _, tt := range tests {
		if got := generatorConfigMapOK(&corev1.ConfigMap{Data: tt.data}); got != tt.want {
			t.Errorf("%s: generatorConfigMapOK = %v, want %v", tt.name, got, tt.want)
		}
	}
	cm := desiredGeneratorConfigMap("argocd")
	if cm.Name != "ocm-placement-generator" || cm.Namespace != "argocd" || !managedByController(cm) || !generatorConfigMapOK(cm) {
		t.Errorf("desiredGeneratorConfigMap = %+v", cm)
	}
}
