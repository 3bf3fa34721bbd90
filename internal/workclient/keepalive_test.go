package workclient_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestKeepAliveConfigFile: a gRPC config without keepalive gets a copy with the default one, which sdk-go
// reads as such; a config that sets keepalive is used as it is.
func TestKeepAliveConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	plain := write("plain.yaml", "url: 127.0.0.1:8091\ntokenFile: /var/run/token\n")
	path, err := workclient.KeepAliveConfigFile(plain, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := grpcoptions.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.KeepAliveConfig; !k.Enable || k.Time == nil || *k.Time != workclient.KeepAliveTime || k.Timeout == nil ||
		*k.Timeout != workclient.KeepAliveTimeout || cfg.URL != "127.0.0.1:8091" || cfg.TokenFile != "/var/run/token" {
		t.Fatalf("the copy reads as %+v with keepalive %+v", cfg, cfg.KeepAliveConfig)
	}
	own := write("own.yaml", "url: 127.0.0.1:8091\nkeepAliveConfig:\n  enable: false\n")
	if path, err := workclient.KeepAliveConfigFile(own, t.TempDir()); err != nil || path != own {
		t.Fatalf("a config with its own keepalive: %s, %v", path, err)
	}
}

// TestPartitionedConnection: the network between the transport and the server drops its traffic for a
// moment without resetting anything (a silent partition, a NAT that forgot the flow), so that the transport's
// connections are dead and nobody tells it. It notices by itself (keepalive), connects again and resyncs: a
// work published after the partition is delivered, and its status reaches the transport.
func TestPartitionedConnection(t *testing.T) {
	ctx := context.Background()
	g, relay := startRelayedTransport(t)

	relay.Partition()
	time.Sleep(2 * time.Second)
	relay.Restore()
	start := time.Now()
	testutil.EventuallyWithin(t, 90*time.Second, "a work published after the partition", func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return g.Apply(pctx, pullWork("cluster1", "after", "v1"))
	})
	testutil.EventuallyWithin(t, 90*time.Second, "its status back at the transport", func() error { return appliedAt(g, "cluster1", "after", 1) })
	t.Logf("delivered with its status %s after the partition ended", time.Since(start).Round(100*time.Millisecond))
}

// TestStalledHubKeepsItsConnections: the server stops answering for 25 s (a saturated hub, a long pause) and
// then goes on, with nothing lost on the way. The transport keeps its connections through the stall — it
// would not with keepalive given up after 15 s — and the work's next version, published after it over the
// same connection as the first, is delivered.
func TestStalledHubKeepsItsConnections(t *testing.T) {
	ctx := context.Background()
	g, relay := startRelayedTransport(t)

	connections := relay.Accepted()
	const stall = 25 * time.Second
	if stall >= workclient.KeepAliveTime+workclient.KeepAliveTimeout {
		t.Fatalf("a stall of %s outlasts the keepalive (%s + %s)", stall, workclient.KeepAliveTime, workclient.KeepAliveTimeout)
	}
	relay.Stall()
	time.Sleep(stall)
	relay.Restore()
	if err := g.Apply(ctx, pullWork("cluster1", "before", "v2")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "applied after the stall", func() error { return appliedAt(g, "cluster1", "before", 2) })
	if n := relay.Accepted(); n != connections {
		t.Fatalf("the transport connected %d times more after a %s stall; want it to keep its connections", n-connections, stall)
	}
}

// startRelayedTransport starts a server with an agent of cluster1, and the transport connected to it through a
// relay, and waits until the work "before" (generation 1) is applied, so that a fault of the relay comes after
// the transport's connections are in use. The relay closes when the test ends.
func startRelayedTransport(t *testing.T) (*workclient.GRPC, *loopback.Relay) {
	t.Helper()
	ctx := context.Background()
	s := startServer(t, "cluster1")
	startAgent(t, s, "cluster1")
	relay, err := loopback.StartRelay(s.SourceAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	g, _ := startTransportAt(t, relay.Addr, s.HTTPAddr())
	testutil.EventuallyWithin(t, 30*time.Second, "the works listed", func() error { return g.Ready(ctx) })
	if err := g.Apply(ctx, pullWork("cluster1", "before", "v1")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "applied before the fault", func() error { return appliedAt(g, "cluster1", "before", 1) })
	return g, relay
}
