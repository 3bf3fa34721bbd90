package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

// TestSchemaRejectsBadValues: each chart's values.schema.json refuses bad values before anything is rendered,
// with a message that names the value to fix, in Helm 4 (helm template) and in Helm 3 (the library's install, a
// client-only dry run).
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, chart, values string
		// want are substrings of the error, the path of each value to fix first.
		want []string
	}{
		{"unknown transport", hubChart, "transport: grpcc",
			[]string{"at '/transport': value must be one of 'kube', 'grpc'"}},
		{"misspelt value", hubChart, "controller: {replica: 3}",
			[]string{"at '/controller': additional properties 'replica' not allowed"}},
		{"a number as a string", hubChart, "controller: {workers: '16'}",
			[]string{"at '/controller/workers': got string, want integer"}},
		{"not a duration", hubChart, "controller: {applyTimeout: 5 minutes}",
			[]string{"at '/controller/applyTimeout': '5 minutes' does not match pattern"}},
		{"replicas without leader election", hubChart, "controller: {replicas: 3, leaderElection: false}",
			[]string{"at '/controller/leaderElection': value must be true"}},
		{"grpc without a server", hubChart, "transport: grpc",
			[]string{"at '/controller/grpc/address': minLength: got 0, want 1", "at '/controller/grpc/restURL': minLength: got 0, want 1"}},
		{"a server without database or certificate or tokens", hubChart, "transport: grpc\nserver: {enabled: true}",
			[]string{"at '/server/database/existingSecret': minLength: got 0, want 1", "at '/server/tls/secretName': minLength: got 0, want 1",
				"at '/server/auth/tokenSecret/name': minLength: got 0, want 1", "at '/controller/grpc/tokenSecret/name': minLength: got 0, want 1"}},
		{"tokens in plain text", hubChart, "server: {enabled: true, database: {existingSecret: db}, tls: {enabled: false}, auth: {tokenSecret: {name: tokens}}}",
			[]string{"at '/server/auth/tokenSecret/name': maxLength: got 6, want 0", "at '/server/auth/allowAnonymous': value must be true"}},
		{"PostgreSQL without a server", hubChart, "postgresql: {enabled: true}",
			[]string{"at '/server/enabled': value must be true"}},
		{"a bad digest", hubChart, "image: {digest: 'sha256:xyz'}",
			[]string{"at '/image/digest': 'sha256:xyz' does not match pattern"}},
		{"agent without a cluster name", agentChart, "hub: {kubeconfigSecret: {name: hub}}",
			[]string{"at '/clusterName': minLength: got 0, want 1"}},
		{"agent with a bad cluster name", agentChart, "clusterName: Cluster_1\nhub: {kubeconfigSecret: {name: hub}}",
			[]string{"at '/clusterName': 'Cluster_1' does not match pattern"}},
		{"agent kube without hub kubeconfig", agentChart, "clusterName: cluster1",
			[]string{"at '/hub/kubeconfigSecret/name': minLength: got 0, want 1"}},
		{"agent grpc without address", agentChart, "clusterName: cluster1\ndriver: grpc",
			[]string{"at '/grpc/address': minLength: got 0, want 1"}},
		{"agent token without TLS", agentChart, "clusterName: cluster1\ndriver: grpc\ngrpc: {address: 'server:8091', tokenSecret: {name: token}}",
			[]string{"at '/grpc/tokenSecret/name': maxLength: got 5, want 0"}},
		{"unknown driver", agentChart, "clusterName: cluster1\ndriver: mqtt",
			[]string{"at '/driver': value must be one of 'kube', 'grpc'"}},
		{"console upstream that is no address", hubChart, "server: {console: {redisUpstream: argocd-redis}}",
			[]string{"at '/server/console/redisUpstream': 'argocd-redis' does not match pattern"}},
		{"agent console in the basic mode without the server", agentChart, "clusterName: cluster1\nhub: {kubeconfigSecret: {name: hub}}\nconsole: {enabled: true}",
			[]string{"at '/grpc/address': minLength: got 0, want 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(tc.values+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := helm(t, "template", "bad", tc.chart, "--values", file)
			assertSchemaError(t, "helm template (Helm 4)", err, tc.want)

			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			chrt, err := loader.Load(tc.chart)
			if err != nil {
				t.Fatal(err)
			}
			install := action.NewInstall(&action.Configuration{})
			install.ReleaseName, install.Namespace = "bad", "default"
			install.DryRun, install.ClientOnly = true, true
			_, err = install.Run(chrt, vals)
			assertSchemaError(t, "the Helm 3 library's install", err, tc.want)
		})
	}
}

func assertSchemaError(t *testing.T, by string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s accepted the values", by)
		return
	}
	if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
		t.Errorf("%s refused the values, but not by the schema: %v", by, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the error does not say %q:\n%v", by, w, err)
		}
	}
}
