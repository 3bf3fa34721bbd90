package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// The memory test runs the fleet in a child process (this test binary again), so that its heap holds the
// simulated clusters and nothing else: the server, PostgreSQL and the source stay in the parent.
const (
	memoryChildEnv    = "SIM_MEMORY_CHILD"
	memoryURLEnv      = "SIM_MEMORY_URL"
	memoryClustersEnv = "SIM_MEMORY_CLUSTERS"
	memoryAppsEnv     = "SIM_MEMORY_APPS"
	memoryWorkersEnv  = "SIM_MEMORY_WORKERS"
	// memoryProfileEnv names a file for the child's heap profile once loaded.
	memoryProfileEnv = "SIM_MEMORY_PROFILE"
)

// memorySample is what the child reports.
type memorySample struct {
	Heap       uint64 `json:"heap"` // live heap after a GC
	RSS        uint64 `json:"rss"`
	Goroutines int    `json:"goroutines"`
	Works      int64  `json:"works"`
	Synced     int64  `json:"synced"`
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestMemoryPerCluster measures the heap of a simulated cluster over gRPC: connected with no works, and with
// its works applied and their Applications Synced/Healthy. SIM_MEMORY_CLUSTERS (default 100) and
// SIM_MEMORY_APPS (default 50 per cluster) set the size:
//
//	go test ./internal/sim -run TestMemoryPerCluster -v
func TestMemoryPerCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	if testutil.RaceEnabled {
		t.Skip("memory figures of a -race build mean nothing")
	}
	clusters, apps := envInt(memoryClustersEnv, 100), envInt(memoryAppsEnv, 50)
	s := startServer(t)
	g := startSource(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	child := testutil.StartChild(ctx, t, memoryChildEnv+"=1", memoryURLEnv+"="+s.AgentAddr(),
		fmt.Sprintf("%s=%d", memoryClustersEnv, clusters), fmt.Sprintf("%s=%d", memoryAppsEnv, apps))
	lines := child.Lines
	read := func(what string) memorySample {
		t.Helper()
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), what+" "); ok {
				var m memorySample
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Fatal(err)
				}
				return m
			}
		}
		err := lines.Err()
		if err == nil {
			err = child.Cmd.Wait()
		}
		t.Fatalf("the child ended before reporting %s: %v", what, err)
		return memorySample{}
	}

	base := read("BASE")
	connected := read("CONNECTED")
	start := time.Now()
	for c, cluster := range ClusterNames("mem-", 1, clusters) {
		for i := range apps {
			hub := hubApplication(fmt.Sprintf("app-%d-%d", c, i), goodRepo, nil)
			hub.SetLabels(map[string]string{argocd.LabelPull: "true", "app.kubernetes.io/part-of": "bench"})
			w, err := application.BuildWork(hub, application.BuildOptions{Cluster: cluster, SpokeArgoCDNamespace: "argocd"})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Apply(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("published %d works in %s", clusters*apps, time.Since(start).Round(time.Millisecond))
	if _, err := io.WriteString(child.Input, "published\n"); err != nil {
		t.Fatal(err)
	}
	loaded := read("LOADED")
	t.Logf("delivered and synced after %s", time.Since(start).Round(time.Millisecond))

	perCluster := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(clusters) / 1024 }
	t.Logf("%d clusters × %d Applications (Go %s, GOMAXPROCS %d):", clusters, apps, runtime.Version(), runtime.GOMAXPROCS(0))
	t.Logf("  connected, no works: %6.1f KiB heap per cluster, %.1f goroutines per cluster", perCluster(base.Heap, connected.Heap),
		float64(connected.Goroutines-base.Goroutines)/float64(clusters))
	t.Logf("  with %d works each:  %6.1f KiB heap per cluster (%.2f KiB per work), RSS %.0f MiB in all (%.1f KiB per cluster)",
		apps, perCluster(base.Heap, loaded.Heap), perCluster(connected.Heap, loaded.Heap)/float64(apps),
		float64(loaded.RSS)/(1<<20), perCluster(base.RSS, loaded.RSS))
	if loaded.Works != int64(clusters*apps) || loaded.Synced != int64(clusters*apps) {
		t.Errorf("the child holds %d works, %d synced; want %d", loaded.Works, loaded.Synced, clusters*apps)
	}
}

// memoryChild runs a fleet and reports its memory: BASE before it starts, CONNECTED once every cluster is
// connected, LOADED once the parent published the works and all are Synced/Healthy.
func memoryChild() int {
	clusters, apps := envInt(memoryClustersEnv, 100), envInt(memoryAppsEnv, 50)
	if os.Getenv(memoryProfileEnv) != "" {
		runtime.MemProfileRate = 1
	}
	report := func(what string, f *Fleet) {
		m := memorySample{Heap: testutil.HeapInUse(), RSS: rss(), Goroutines: runtime.NumGoroutine()}
		if f != nil {
			s := f.Stats()
			m.Works, m.Synced = s.Works, s.SyncedHealthy
		}
		data, _ := json.Marshal(m)
		fmt.Printf("%s %s\n", what, data)
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "memory child:", err)
		return 1
	}
	report("BASE", nil)
	f, err := NewFleet(Config{
		Transport: workclient.TransportGRPC,
		GRPC:      &grpcoptions.GRPCOptions{Dialer: &grpcoptions.GRPCDialer{URL: os.Getenv(memoryURLEnv)}},
		Clusters:  ClusterNames("mem-", 1, clusters),
		Argo:      ArgoConfig{SyncDelay: time.Second, SyncJitter: 0.2, ResourcesPerApp: 2},
		Workers:   envInt(memoryWorkersEnv, 0),
	})
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	if err := f.Start(ctx); err != nil {
		return fail(err)
	}
	defer f.Stop()
	report("CONNECTED", f)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	want := int64(clusters * apps)
	deadline := time.Now().Add(8 * time.Minute)
	for i := 0; f.Stats().SyncedHealthy < want; i++ {
		if i%25 == 0 {
			fmt.Fprintf(os.Stderr, "memory child: %+v\n", f.Stats())
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("stats %+v after 8 minutes", f.Stats()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Let the last statuses go out.
	for last := f.Stats().StatusUpdates; ; {
		time.Sleep(time.Second)
		if now := f.Stats().StatusUpdates; now == last {
			break
		} else {
			last = now
		}
	}
	if path := os.Getenv(memoryProfileEnv); path != "" {
		if err := writeHeapProfile(path); err != nil {
			return fail(err)
		}
	}
	report("LOADED", f)
	return 0
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path) //nolint:gosec // the tester names the file
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// rss is the process's resident set size.
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
