package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

func plainClient(t *testing.T, addr string) pbv1.CloudEventServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pbv1.NewCloudEventServiceClient(conn)
}

// scrape returns the line of /metrics that starts with the series, or "".
func scrape(t *testing.T, s *Server, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return line
		}
	}
	return ""
}

// TestResyncAfterAgentRestart stops the agent while the source updates, creates and deletes works; a new
// agent with an empty cache gets exactly the current state.
func TestResyncAfterAgentRestart(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, testOptions(testDB(t), "one"))
	createConsumer(t, s, "cluster1")
	agent := startAgent(t, grpcOptions(s.AgentAddr()), "cluster1")
	source := startSource(t, grpcOptions(s.SourceAddr()), "hub")
	applied(t, source, "cluster1", "keep", "update", "delete")

	agent.cancel()
	testutil.EventuallyTrue(t, waitTimeout, "the agent to leave", func() bool { return !s.streams.hasAgent("cluster1") })
	if _, err := source.works("cluster1").Patch(ctx, "update", kubetypes.MergePatchType, manifestsPatch(t, "cm-new"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := source.works("cluster1").Create(ctx, newWork("cluster1", "create", "cm-create"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the source to cache the created work", func() bool { return source.work("cluster1", "create") != nil })
	if err := source.works("cluster1").Delete(ctx, "delete", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	restarted := startAgent(t, grpcOptions(s.AgentAddr()), "cluster1")
	testutil.EventuallyTrue(t, waitTimeout, "the statuses of the changes at the source", func() bool {
		return appliedMessage(source, "cluster1", "update") == "cm-new" && appliedMessage(source, "cluster1", "create") == "cm-create"
	})
	testutil.EventuallyTrue(t, waitTimeout, "the deleted work to leave the source", func() bool { return source.work("cluster1", "delete") == nil })
	testutil.EventuallyTrue(t, waitTimeout, "the deleted work to leave the database", func() bool {
		_, err := s.store.GetBundle(ctx, string(works2UID("hub", "cluster1", "delete")))
		return err != nil
	})
	if w := restarted.work("keep"); w == nil || manifestNames(w) != "cm-keep" {
		t.Fatalf("the untouched work at the new agent: %+v", w)
	}
}

func TestUndeliveredAndStuckDeletes(t *testing.T) {
	ctx := context.Background()
	o := testOptions(testDB(t), "one")
	o.UndeliveredAfter, o.StuckDeleteAfter, o.SweepInterval = time.Second, time.Second, 200*time.Millisecond
	s := startServer(t, o)
	createConsumer(t, s, "cluster1", "cluster2")
	agent := startAgent(t, grpcOptions(s.AgentAddr()), "cluster1")
	agent.SetSilent(true)
	source := startSource(t, grpcOptions(s.SourceAddr()), "hub")
	testutil.EventuallyTrue(t, waitTimeout, "the agent to subscribe", func() bool { return s.streams.hasAgent("cluster1") })
	if _, err := source.works("cluster1").Create(ctx, newWork("cluster1", "quiet", "cm-quiet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the spec to be published again", func() bool { return agent.Received() >= 2 })
	agent.SetSilent(false)
	testutil.EventuallyTrue(t, waitTimeout, "the status to arrive at last", func() bool { return appliedMessage(source, "cluster1", "quiet") == "cm-quiet" })

	// No agent ever connects for cluster2: its deletion cannot complete.
	if _, err := source.works("cluster2").Create(ctx, newWork("cluster2", "orphan", "cm-orphan"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the source to cache the work", func() bool { return source.work("cluster2", "orphan") != nil })
	if err := source.works("cluster2").Delete(ctx, "orphan", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the stuck delete to show", func() bool {
		return scrape(t, s, "argocd_pull_server_stuck_deletes") == "argocd_pull_server_stuck_deletes 1"
	})
	if scrape(t, s, "argocd_pull_server_republished_total") == "argocd_pull_server_republished_total 0" {
		t.Error("republished specs are not counted")
	}
}

// failingStore fails the reads of resyncs and notifications while failing is set, as a database that went
// away between two statements would.
type failingStore struct {
	store.Store
	failing atomic.Bool
}

var errDatabaseGone = errors.New("the database went away")

func (f *failingStore) StatusHashes(ctx context.Context, source, consumer string) ([]store.HashRow, error) {
	if f.failing.Load() {
		return nil, errDatabaseGone
	}
	return f.Store.StatusHashes(ctx, source, consumer)
}

func (f *failingStore) SpecVersions(ctx context.Context, consumer string) ([]store.SpecVersion, error) {
	if f.failing.Load() {
		return nil, errDatabaseGone
	}
	return f.Store.SpecVersions(ctx, consumer)
}

func (f *failingStore) LoadSpecs(ctx context.Context, ids []string) ([]store.SpecRow, error) {
	if f.failing.Load() {
		return nil, errDatabaseGone
	}
	return f.Store.LoadSpecs(ctx, ids)
}

// startFailingServer starts a server whose store fails on demand.
func startFailingServer(t *testing.T, o *Options) (*Server, *failingStore) {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := New(o)
	fs := &failingStore{}
	s.openStore = func(ctx context.Context, cfg store.Config) (store.Store, error) {
		st, err := store.New(ctx, cfg)
		fs.Store = st
		return fs, err
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, fs
}

// subscribeRaw opens a subscription and returns a channel that receives how it ends.
func subscribeRaw(t *testing.T, c pbv1.CloudEventServiceClient, req *pbv1.SubscriptionRequest) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.Subscribe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

func wantEnded(t *testing.T, what string, ended <-chan error, want codes.Code) {
	t.Helper()
	select {
	case err := <-ended:
		if status.Code(err) != want {
			t.Fatalf("%s ended with %v, want code %s", what, err, want)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("%s did not end", what)
	}
}

// TestFailedResyncsAndLoadsResetSubscriptions: sdk-go's clients send a resync once per subscription, so a resync
// the server cannot answer, or a change another instance committed that it cannot load, ends the
// subscriptions concerned with Unavailable and their clients resync when they subscribe again.
func TestFailedResyncsAndLoadsResetSubscriptions(t *testing.T) {
	db := testDB(t)
	s, fs := startFailingServer(t, testOptions(db, "a"))
	other := startServer(t, testOptions(db, "b"))
	createConsumer(t, s, "cluster1", "cluster2")
	src, agt := plainClient(t, s.SourceAddr()), plainClient(t, s.AgentAddr())
	source := subscribeRaw(t, src, &pbv1.SubscriptionRequest{Source: "hub", DataType: dataType.String()})
	agent1 := subscribeRaw(t, agt, &pbv1.SubscriptionRequest{ClusterName: "cluster1", DataType: dataType.String()})
	agent2 := subscribeRaw(t, agt, &pbv1.SubscriptionRequest{ClusterName: "cluster2", DataType: dataType.String()})
	testutil.EventuallyTrue(t, waitTimeout, "the agents to subscribe", func() bool {
		return s.streams.hasAgent("cluster1") && s.streams.hasAgent("cluster2")
	})
	fs.failing.Store(true)

	statusResync := types.NewEventBuilder("hub", types.CloudEventsType{CloudEventsDataType: dataType,
		SubResource: types.SubResourceStatus, Action: types.ResyncRequestAction}).WithClusterName("cluster1").NewEvent()
	_ = statusResync.SetData(cloudevents.ApplicationJSON, map[string]any{"statusHashes": []any{}})
	wantCode(t, "a status resync the store cannot answer", publish(t, src, &statusResync), codes.Unavailable)
	wantEnded(t, "the source's subscription", source, codes.Unavailable)

	specResync := types.NewEventBuilder("cluster1-agent", types.CloudEventsType{CloudEventsDataType: dataType,
		SubResource: types.SubResourceSpec, Action: types.ResyncRequestAction}).WithClusterName("cluster1").NewEvent()
	_ = specResync.SetData(cloudevents.ApplicationJSON, map[string]any{"resourceVersions": []any{}})
	wantCode(t, "a spec resync the store cannot answer", publish(t, agt, &specResync), codes.Unavailable)
	wantEnded(t, "the subscription of cluster1's agent", agent1, codes.Unavailable)

	// A spec for cluster2 committed through the other instance cannot be loaded here.
	wantCode(t, "a spec through the other instance", publish(t, plainClient(t, other.SourceAddr()),
		specEvt("hub", "cluster2", "r1", 1, types.CreateRequestAction)), codes.OK)
	wantEnded(t, "the subscription of cluster2's agent", agent2, codes.Unavailable)
}

// TestAgentWithoutResyncIsDisconnected: an agent that subscribes and sends no spec resync within
// --agent-resync-grace has its connection closed, not only its stream, so that its client starts over; an
// agent that resyncs keeps its subscription. (After a server restart at 150,000 Applications one sdk-go agent
// client held a subscription without a receiver and never resynced.)
func TestAgentWithoutResyncIsDisconnected(t *testing.T) {
	o := testOptions(testDB(t), "one")
	o.AgentResyncGrace, o.StreamHeartbeatInterval = time.Second, time.Second
	s := startServer(t, o)
	createConsumer(t, s, "cluster1", "cluster2")
	conn, err := grpc.NewClient(s.AgentAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	silent := subscribeRaw(t, pbv1.NewCloudEventServiceClient(conn), &pbv1.SubscriptionRequest{ClusterName: "cluster1", DataType: dataType.String()})
	agt := plainClient(t, s.AgentAddr())
	resyncing := subscribeRaw(t, agt, &pbv1.SubscriptionRequest{ClusterName: "cluster2", DataType: dataType.String()})
	specResync := types.NewEventBuilder("cluster2-agent", types.CloudEventsType{CloudEventsDataType: dataType,
		SubResource: types.SubResourceSpec, Action: types.ResyncRequestAction}).WithClusterName("cluster2").NewEvent()
	_ = specResync.SetData(cloudevents.ApplicationJSON, map[string]any{"resourceVersions": []any{}})
	wantCode(t, "cluster2's spec resync", publish(t, agt, &specResync), codes.OK)

	wantEnded(t, "the subscription of the agent that did not resync", silent, codes.Unavailable)
	testutil.EventuallyTrue(t, waitTimeout, "its connection to be closed", func() bool { return conn.GetState() != connectivity.Ready })
	select {
	case err := <-resyncing:
		t.Fatalf("the subscription of the agent that resynced ended: %v", err)
	case <-time.After(3 * o.AgentResyncGrace):
	}
	if line := scrape(t, s, "argocd_pull_server_agents_without_resync_total"); line != "argocd_pull_server_agents_without_resync_total 1" {
		t.Errorf("metric: %q, want 1", line)
	}
}

// TestStuckAgentDoesNotHoldUpOthers subscribes an agent that never reads its stream, and the agent of another
// consumer whose specs go through the same dispatch shard. While the source keeps creating works for both,
// the other agent receives its work, and the stuck subscription ends with ResourceExhausted once its queue
// stayed full for --agent-send-timeout, so that its agent resubscribes and resyncs. (sdk-go's broker waited
// on the stuck subscription's queue for as long as the stream lived, holding up its shard.)
func TestStuckAgentDoesNotHoldUpOthers(t *testing.T) {
	ctx := context.Background()
	o := testOptions(testDB(t), "one")
	o.AgentQueueLength, o.AgentSendTimeout = 4, time.Second
	s := startServer(t, o)
	stuck, other := sameShard(s.dispatch)
	createConsumer(t, s, stuck, other)

	// Small flow-control windows (no growing them): the server's sends block after about 128 KB.
	conn, err := grpc.NewClient(s.AgentAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := pbv1.NewCloudEventServiceClient(conn).Subscribe(ctx, &pbv1.SubscriptionRequest{ClusterName: stuck, DataType: dataType.String()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, grpcOptions(s.AgentAddr()), other)
	source := startSource(t, grpcOptions(s.SourceAddr()), "hub")
	testutil.EventuallyTrue(t, waitTimeout, "both agents to subscribe", func() bool {
		return s.streams.hasAgent(stuck) && s.streams.hasAgent(other)
	})

	// 16 works of 48 KB fill the stuck stream's windows and its queue several times over.
	for i := range 16 {
		w := newWork(stuck, fmt.Sprintf("big-%d", i), "cm")
		w.Annotations["padding"] = strings.Repeat("x", 48<<10)
		if _, err := source.works(stuck).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := source.works(other).Create(ctx, newWork(other, "small", "cm-small"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the other agent to apply its work", func() bool {
		return appliedMessage(source, other, "small") == "cm-small"
	})
	if agent.work("small") == nil {
		t.Fatal("the other agent does not hold its work")
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the stuck subscription ended with %v, want ResourceExhausted", err)
		}
		break
	}
	testutil.EventuallyTrue(t, waitTimeout, "the stuck subscription to be forgotten", func() bool { return !s.streams.hasAgent(stuck) })
}

// sameShard returns two consumer names whose specs go through the same dispatch shard.
func sameShard(d *dispatcher) (string, string) {
	first := map[int]string{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("cluster%d", i)
		if f, ok := first[d.shard(name)]; ok {
			return f, name
		}
		first[d.shard(name)] = name
	}
}
