package sim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error; empty for none
	}{
		{"grpc", []string{"--grpc-config=x.yaml"}, ""},
		{"kube", []string{"--transport=kube", "--hub-kubeconfig=k"}, ""},
		{"grpc without config", nil, "--grpc-config is required"},
		{"kube without kubeconfig", []string{"--transport=kube"}, "--hub-kubeconfig is required"},
		{"unknown transport", []string{"--transport=mqtt"}, `--transport must be "grpc" or "kube"`},
		{"no clusters", []string{"--grpc-config=x", "--clusters=0"}, "--clusters must be positive"},
		{"bad regexp", []string{"--grpc-config=x", "--invalid-repo=("}, "--invalid-repo"},
		{"jitter", []string{"--grpc-config=x", "--sync-jitter=2"}, "--sync-jitter"},
		{"negative churn", []string{"--grpc-config=x", "--churn=-1"}, "--churn"},
		{"gc percent", []string{"--grpc-config=x", "--gc-percent=0"}, "--gc-percent must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestConfigAgentTokensOverTLS: with --agent-token-file and a gRPC config that has only the server's CA (no
// token or certificate of its own, for which alone sdk-go turns TLS on), each cluster's token goes over TLS
// with that CA; without a CA the options are refused, as a token is only sent over TLS.
func TestConfigAgentTokensOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := loopback.NewCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("admin-token,admin\nt1,agent,cluster1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(content string) *Options {
		path := filepath.Join(dir, "grpc.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		o := NewOptions()
		o.GRPCConfig, o.AgentTokenFile = path, tokens
		return o
	}
	cfg, err := config("url: 127.0.0.1:1\ncaFile: " + ca.CertFile + "\n").Config()
	if err != nil {
		t.Fatal(err)
	}
	if tlsConfig := cfg.GRPC.Dialer.TLSConfig; tlsConfig == nil || tlsConfig.RootCAs == nil || cfg.ClusterTokens["cluster1"] != "t1" {
		t.Fatalf("TLS %+v, tokens %v: want TLS with the CA and cluster1's token", tlsConfig, cfg.ClusterTokens)
	}
	if _, err := config("url: 127.0.0.1:1\n").Config(); err == nil || !strings.Contains(err.Error(), "needs caFile") {
		t.Fatalf("a token file without a CA: %v", err)
	}
}

// TestRun runs `argocd-pull sim` as the command does, against argocd-pull server, and reads its metrics; the
// process runs with the garbage collector's percentage of --gc-percent.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	s := startServer(t)
	cfg := filepath.Join(t.TempDir(), "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("url: "+s.AgentAddr()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := l.Addr().String()
	_ = l.Close()

	o := NewOptions()
	fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--grpc-config=" + cfg, "--clusters=3", "--cluster-prefix=run-", "--cluster-start=7",
		"--metrics-address=" + metrics, "--churn=1", "--gc-percent=250"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	testutil.EventuallyWithin(t, 30*time.Second, "metrics", func() error {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		for _, want := range []string{"argocd_pull_sim_clusters_connected 3", "argocd_pull_sim_works_applied_total 0",
			"argocd_pull_sim_status_updates_total 0", "argocd_pull_sim_deletions_total 0", "go_goroutines"} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("no %q in the metrics", want)
			}
		}
		return nil
	})
	if got := debug.SetGCPercent(250); got != 250 {
		t.Errorf("the simulator runs with GOGC %d, want the 250 of --gc-percent", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}
