package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"

	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// The connection memory test opens the agents' connections from a child process (this test binary again), so
// that the parent's heap holds the server's side of them and nothing else.
const (
	connChildEnv = "SERVER_CONN_CHILD"
	connAddrEnv  = "SERVER_CONN_ADDR"
	connCAEnv    = "SERVER_CONN_CA"
	connCountEnv = "SERVER_CONN_COUNT"
)

// maxHeapPerAgent bounds the server's heap per connected agent (TLS, one subscription, nothing published):
// 24.7 KiB measured (the same with -race), 56.8 KiB with gRPC's own read buffer on the connections.
const maxHeapPerAgent = 40 << 10

// TestAgentConnectionMemory measures the server's heap per connected agent: with thousands of agents,
// connections are most of the server's memory.
func TestAgentConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const agents = 300
	s, pki := securedServer(t)
	time.Sleep(500 * time.Millisecond) // the server's start-up garbage
	before := testutil.HeapInUse()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := testutil.StartChild(ctx, t, connChildEnv+"=1", connAddrEnv+"="+s.AgentAddr(),
		connCAEnv+"="+filepath.Join(pki.dir, "ca.crt"), fmt.Sprintf("%s=%d", connCountEnv, agents))
	if !child.Lines.Scan() || child.Lines.Text() != "CONNECTED" {
		t.Fatalf("the child did not connect its agents: %q %v", child.Lines.Text(), child.Lines.Err())
	}
	time.Sleep(500 * time.Millisecond) // the last subscriptions' first reads
	connected := testutil.HeapInUse()
	per := float64(int64(connected)-int64(before)) / agents
	t.Logf("%d agents over TLS, one subscription each: %.1f KiB of server heap per agent", agents, per/1024)
	if per > maxHeapPerAgent {
		t.Errorf("the server holds %.1f KiB of heap per connected agent; want at most %d KiB", per/1024, maxHeapPerAgent>>10)
	}
}

// connChild connects the agents of TestAgentConnectionMemory, each on its own connection with the agent token
// of cluster1, says CONNECTED once every subscription is open, and holds them until its input closes.
func connChild() int {
	count, err := strconv.Atoi(os.Getenv(connCountEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ca, err := os.ReadFile(os.Getenv(connCAEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	token := oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "agent1-token"})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range count {
		conn, err := grpc.NewClient(os.Getenv(connAddrEnv), grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(token))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = conn.Close() }()
		stream, err := pbv1.NewCloudEventServiceClient(conn).Subscribe(ctx,
			&pbv1.SubscriptionRequest{ClusterName: "cluster1", DataType: dataType.String()})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := stream.Header(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("CONNECTED")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
