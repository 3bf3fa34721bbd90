package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	sourcecodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
)

// BenchmarkServer1000Agents runs one server instance on PostgreSQL with 1,000 connected agents and one
// source, each on its own gRPC connection speaking sdk-go's CloudEventService as sdk-go's clients do: a
// subscription stream, and unary publishes of events encoded by sdk-go's own codecs (the source codec for
// specs, the agent codec for statuses, status hash included), so the server sees exactly the bytes the real
// clients send. The clients are that thin on purpose: the real ones run on other machines, and this 2-core
// machine runs the server, PostgreSQL and the clients.
//
// The works are those the controller builds for an Argo CD Application (application.BuildWork), 10 per
// agent; the statuses carry the Application's feedback by appstatus.FeedbackRules. First the source creates
// every work, 100 publishes at a time, and the spec events are timed until every agent received its works.
// Then, b.N times, every agent reports a new status of each of its works (its publishes one after another,
// all agents at once), timed until the source received every status. It reports specs/s and statuses/s,
// the CPU time per status of this process (server and clients) and of PostgreSQL, which tell what the
// rates would be on a machine that others do not share, and the bytes PostgreSQL holds per work (the
// resources table with its indexes and TOAST, compacted).
func BenchmarkServer1000Agents(b *testing.B) {
	const agents, worksPerAgent, publishers = 1000, 10, 100
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The framework runs the benchmark once with b.N = 1 before the requested count: one database each.
	db, err := pg.CreateDatabase(ctx, fmt.Sprintf("bench_server_%d_%d", b.N, time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	o := testOptions(db, "bench")
	if err := o.Validate(); err != nil {
		b.Fatal(err)
	}
	s := New(o)
	// The broker logs every subscription; a thousand of them would bury the results.
	if err := s.Start(klog.NewContext(ctx, logr.Discard())); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)

	clusters := make([]string, agents)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("cluster%04d", i)
	}
	createConsumer(b, s, clusters...)
	src := subscribeBench(ctx, b, s.SourceAddr(), &pbv1.SubscriptionRequest{Source: "hub", DataType: dataType.String()})
	fleet := make([]*benchClient, agents)
	for i, c := range clusters {
		fleet[i] = subscribeBench(ctx, b, s.AgentAddr(), &pbv1.SubscriptionRequest{ClusterName: c, DataType: dataType.String()})
	}
	works := make([]*workv1.ManifestWork, 0, agents*worksPerAgent)
	for _, c := range clusters {
		for i := range worksPerAgent {
			works = append(works, benchWork(b, c, i))
		}
	}

	specs := make([]*pbv1.CloudEvent, len(works))
	createType := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceSpec, Action: types.CreateRequestAction}
	for i, w := range works {
		evt, err := sourcecodec.NewManifestBundleCodec().Encode("hub", createType, w)
		if err != nil {
			b.Fatal(err)
		}
		if specs[i], err = toProto(ctx, evt); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	next := atomic.Int64{}
	for range publishers {
		g.Go(func() error {
			for i := next.Add(1) - 1; i < int64(len(specs)); i = next.Add(1) - 1 {
				if _, err := src.client.Publish(gctx, &pbv1.PublishRequest{Event: specs[i]}); err != nil {
					return fmt.Errorf("publish spec %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	waitCount(b, "every agent to receive its works", func() int64 {
		var n int64
		for _, a := range fleet {
			n += a.received.Load()
		}
		return n
	}, int64(len(works)))
	specRate := float64(len(works)) / time.Since(start).Seconds()

	statusType := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceStatus, Action: types.UpdateRequestAction}
	var elapsed time.Duration
	var cpu, pgCPU float64
	b.ResetTimer()
	for round := range b.N {
		b.StopTimer()
		statuses := make([][]*pbv1.CloudEvent, agents)
		for i := range fleet {
			for _, w := range works[i*worksPerAgent : (i+1)*worksPerAgent] {
				reported := w.DeepCopy()
				reported.Status = realisticStatus(w, round)
				evt, err := agentcodec.NewManifestBundleCodec().Encode(w.Namespace+"-agent", statusType, reported)
				if err != nil {
					b.Fatal(err)
				}
				pb, err := toProto(ctx, evt)
				if err != nil {
					b.Fatal(err)
				}
				statuses[i] = append(statuses[i], pb)
			}
		}
		before := src.received.Load()
		cpuBefore, pgBefore := processCPU(b), postgresCPU(b)
		start := time.Now()
		b.StartTimer()
		g, gctx := errgroup.WithContext(ctx)
		for i, a := range fleet {
			g.Go(func() error {
				for _, pb := range statuses[i] {
					if _, err := a.client.Publish(gctx, &pbv1.PublishRequest{Event: pb}); err != nil {
						return fmt.Errorf("publish a status of %s: %w", clusters[i], err)
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		waitCount(b, "the source to receive every status", src.received.Load, before+int64(len(works)))
		elapsed += time.Since(start)
		cpu, pgCPU = cpu+processCPU(b)-cpuBefore, pgCPU+postgresCPU(b)-pgBefore
	}
	b.StopTimer()
	statuses := float64(b.N * len(works))
	b.ReportMetric(specRate, "specs/s")
	b.ReportMetric(statuses/elapsed.Seconds(), "statuses/s")
	b.ReportMetric(cpu/statuses*1e6, "cpu-us/status")
	b.ReportMetric(pgCPU/statuses*1e6, "pg-cpu-us/status")
	b.ReportMetric(bytesPerWork(b, o.DatabaseURL, len(works)), "B/work")
}

// processCPU is the CPU time this process used (the server and the clients), in seconds.
func processCPU(b *testing.B) float64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// postgresCPU is the CPU time the test's PostgreSQL used so far, in seconds: its postmaster and the
// processes it started (the server's connections among them), from /proc.
func postgresCPU(b *testing.B) float64 {
	b.Helper()
	pid, err := os.ReadFile(filepath.Join(pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	postmaster := strings.SplitN(string(pid), "\n", 2)[0]
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, p := range procs {
		stat, err := os.ReadFile(p) //nolint:gosec // /proc
		if err != nil {
			continue // the process exited
		}
		// The fields after the command name, which is in parentheses: state, ppid, ..., utime (12th), stime.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 || (f[1] != postmaster && filepath.Base(filepath.Dir(p)) != postmaster) {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	return float64(ticks) / clockTicks
}

// clockTicks is the unit of the CPU times in /proc (USER_HZ, 100 on Linux).
const clockTicks = 100

// benchWork is a work as the sdk-go source client publishes it when it creates one.
func benchWork(b testing.TB, cluster string, i int) *workv1.ManifestWork {
	w := realisticWork(b, cluster, i)
	w.UID = works2UID("hub", cluster, w.Name)
	w.Generation, w.ResourceVersion = 1, "0"
	w.Labels[common.CloudEventsOriginalSourceLabelKey] = "hub"
	for j, m := range w.Spec.Workload.Manifests {
		raw, err := m.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		w.Spec.Workload.Manifests[j].Raw, w.Spec.Workload.Manifests[j].Object = raw, nil
	}
	return w
}

// benchClient is one connection with a subscription that counts the events it receives.
type benchClient struct {
	client   pbv1.CloudEventServiceClient
	received atomic.Int64
}

func subscribeBench(ctx context.Context, b *testing.B, addr string, req *pbv1.SubscriptionRequest) *benchClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	c := &benchClient{client: pbv1.NewCloudEventServiceClient(conn)}
	stream, err := c.client.Subscribe(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			evt, err := stream.Recv()
			if err != nil {
				return
			}
			if evt.GetType() != types.HeartbeatCloudEventsType {
				c.received.Add(1)
			}
		}
	}()
	return c
}

// waitCount polls count until it reaches want.
func waitCount(b *testing.B, what string, count func() int64, want int64) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for count() < want {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s: %d of %d", what, count(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bytesPerWork is the size of the resources table, its indexes and its TOAST, compacted by VACUUM FULL (the
// space of replaced statuses, which autovacuum would reuse, does not count), per work.
func bytesPerWork(b *testing.B, url string, works int) float64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "VACUUM FULL resources"); err != nil {
		b.Fatal(err)
	}
	var size, rows int64
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size('resources'), (SELECT count(*) FROM resources)").Scan(&size, &rows); err != nil {
		b.Fatal(err)
	}
	if rows != int64(works) {
		b.Fatalf("the database holds %d works, want %d", rows, works)
	}
	return float64(size) / float64(rows)
}
