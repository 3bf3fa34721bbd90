package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// consoleOptions are test options with the console's redis door open (against an upstream nobody dials here)
// and a hub kubeconfig nothing reads.
func consoleOptions(t *testing.T, db, instance string) *Options {
	t.Helper()
	o := testOptions(db, instance)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: hub, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o.Console.RedisAddress, o.Console.RedisUpstream, o.Console.HubKubeconfig = "127.0.0.1:0", "127.0.0.1:1", kubeconfig
	o.Console.RequestTimeout = 5 * time.Second
	return o
}

// fakeConsoleAgent opens a cluster's console stream on an agent endpoint and answers every request with
// parts answers ("part 1", "part 2", ...; More on all but the last), pause apart; it records the cancels it
// receives.
func fakeConsoleAgent(t *testing.T, addr, cluster string, parts int, pause time.Duration) chan uint64 {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), consoleapi.ClusterHeader, cluster))
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	stream, err := consoleapi.Connect(ctx, conn, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	cancels := make(chan uint64, 16)
	var sendMu sync.Mutex
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			if req.Cancel {
				cancels <- req.ID
				continue
			}
			go func() {
				for i := 1; i <= parts; i++ {
					time.Sleep(pause)
					sendMu.Lock()
					err := stream.Send(&consoleapi.Response{ID: req.ID, Code: http.StatusOK, Body: []byte("part " + strconv.Itoa(i)), More: i < parts})
					sendMu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return cancels
}

// TestConsoleRelay: two instances share a database; a cluster's agent holds its console stream on the first, and
// the second reaches it through the database: one answer, a streamed answer in order, a cancel that reaches the
// agent; a cluster without an agent anywhere is "not connected" at once.
func TestConsoleRelay(t *testing.T) {
	db := testDB(t)
	first := startServer(t, consoleOptions(t, db, "first"))
	second := startServer(t, consoleOptions(t, db, "second"))
	ctx := context.Background()

	fakeConsoleAgent(t, first.AgentAddr(), "c1", 1, 0)
	testutil.Eventually(t, "c1's stream seen from the second instance", func() error {
		if !second.console.Hub.Connected(ctx, "c1") {
			return errors.New("not connected")
		}
		return nil
	})
	resp, err := second.console.Hub.Do(ctx, "c1", consoleapi.Request{Cache: &consoleapi.CacheRequest{Op: consoleapi.CacheGet, Entry: "resources-tree"}})
	if err != nil || resp.Code != http.StatusOK || string(resp.Body) != "part 1" {
		t.Fatalf("relayed request: %+v, %v", resp, err)
	}

	fakeConsoleAgent(t, first.AgentAddr(), "c2", 5, 0)
	testutil.Eventually(t, "c2's stream seen from the second instance", func() error {
		if !second.console.Hub.Connected(ctx, "c2") {
			return errors.New("not connected")
		}
		return nil
	})
	call, err := second.console.Hub.Open(ctx, "c2", consoleapi.Request{Kube: &consoleapi.KubeRequest{Method: http.MethodGet, Path: "/api/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		part, err := call.Next(waitCtx)
		cancel()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, string(part.Body))
		if !part.More {
			break
		}
	}
	if strings.Join(got, ",") != "part 1,part 2,part 3,part 4,part 5" {
		t.Errorf("streamed answer relayed as %v", got)
	}
	call.Close()

	// A call closed while its answer streams (a followed log): the agent is told.
	cancels := fakeConsoleAgent(t, first.AgentAddr(), "c3", 1000, 50*time.Millisecond)
	testutil.Eventually(t, "c3's stream seen from the second instance", func() error {
		if !second.console.Hub.Connected(ctx, "c3") {
			return errors.New("not connected")
		}
		return nil
	})
	follow, err := second.console.Hub.Open(ctx, "c3", consoleapi.Request{Kube: &consoleapi.KubeRequest{Method: http.MethodGet, Path: "/api/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := follow.Next(waitCtx); err != nil {
		t.Fatal(err)
	}
	cancel()
	follow.Close()
	select {
	case <-cancels:
	case <-time.After(10 * time.Second):
		t.Error("closing a relayed streamed answer did not reach the agent")
	}

	if _, err := second.console.Hub.Do(ctx, "nowhere", consoleapi.Request{Kube: &consoleapi.KubeRequest{Method: http.MethodGet, Path: "/api"}}); !errors.Is(err, console.ErrNotConnected) {
		t.Errorf("a cluster without an agent: %v", err)
	}

	// The agent's stream ends: its cluster is not connected anywhere any more.
	first.Stop()
	testutil.Eventually(t, "c1 gone with the first instance", func() error {
		if _, err := second.console.Hub.Do(ctx, "c1", consoleapi.Request{Kube: &consoleapi.KubeRequest{Method: http.MethodGet, Path: "/api"}}); !errors.Is(err, console.ErrNotConnected) {
			return fmt.Errorf("c1: %v", err)
		}
		return nil
	})
}
