package v1alpha1

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestArgoNamespace(t *testing.T) {
	tests := []struct {
		name, namespace, argoNamespace, want string
	}{
		{"set", "team", "argocd", "argocd"},
		{"defaults to the GitOpsCluster's namespace", "argocd", "", "argocd"},
	}
	for _, tt := range tests {
		gc := &GitOpsCluster{ObjectMeta: metav1.ObjectMeta{Namespace: tt.namespace}, Spec: GitOpsClusterSpec{ArgoServer: ArgoServerSpec{ArgoNamespace: tt.argoNamespace}}}
		if got := gc.ArgoNamespace(); got != tt.want {
			t.Errorf("%s: ArgoNamespace() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"GitOpsCluster", "GitOpsClusterList"} {
		if !s.Recognizes(GroupVersion.WithKind(kind)) {
			t.Errorf("scheme does not know %s", kind)
		}
	}
}

func TestDeepCopyKeepsCompatibilityFields(t *testing.T) {
	gc := &GitOpsCluster{Spec: GitOpsClusterSpec{GitOpsAddon: &apiextensionsv1.JSON{Raw: []byte(`{"enabled":true}`)}}}
	cp := gc.DeepCopy()
	cp.Spec.GitOpsAddon.Raw[2] = 'X'
	if string(gc.Spec.GitOpsAddon.Raw) != `{"enabled":true}` {
		t.Errorf("DeepCopy shares spec.gitopsAddon: %s", gc.Spec.GitOpsAddon.Raw)
	}
}
