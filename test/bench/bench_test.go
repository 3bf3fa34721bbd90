package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// TestSmallBenchmark runs the benchmark at 20 × 10 in both transports with short phases, so that the
// benchmark's code is exercised by every test run. It checks the run's own results, not its speed.
func TestSmallBenchmark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	closeLog, err := loopback.LogToFile(filepath.Join(dir, "bench.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	bin, err := loopback.BuildArgocdPull(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var results []*Result
	for _, tr := range []string{"grpc", "kube"} {
		sc := Scenario{Transport: tr, Clusters: 20, AppSets: 10, Concurrency: 16, QPS: 500, Burst: 1000,
			SyncDelay: time.Second, Settle: 6 * time.Second, RestPeriod: 10 * time.Second, Latency: 10 * time.Second, LatencyRate: 5,
			Binary: bin, Dir: filepath.Join(dir, tr), Log: func(f string, a ...any) { t.Logf(tr+": "+f, a...) },
			Console: tr == "grpc", Restart: true, KillControllerAt: 0.5}
		r, err := run(ctx, sc)
		if err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if r.Synced <= 0 || r.Delivered <= 0 || r.Delivered > r.Synced || r.Floor <= 0 {
			t.Errorf("%s: times: delivered %s, synced %s, floor %s", tr, r.Delivered, r.Synced, r.Floor)
		}
		if r.RestStatusEvents != 0 || r.RestHubWrites != 0 {
			t.Errorf("%s: at rest, %v status events and %v hub writes per minute (%v)", tr, r.RestStatusEvents, r.RestHubWrites, r.RestHubWritesByResource)
		}
		if r.LatencySamples == 0 || r.LatencyHubP99 <= 0 || r.LatencyMax < r.LatencyP99 || len(r.LatencySlowest) == 0 ||
			r.LatencySlowest[0].Total != r.LatencyMax.Round(time.Millisecond) || r.LatencyRequests["PATCH"] == 0 {
			t.Errorf("%s: status latency: %d samples, hub p99 %s, max %s, slowest %v, requests %v", tr, r.LatencySamples,
				r.LatencyHubP99, r.LatencyMax, r.LatencySlowest, r.LatencyRequests)
		}
		if r.Orphans != 0 || r.DeleteApps == 0 {
			t.Errorf("%s: deletion: %d orphans, %s", tr, r.Orphans, r.DeleteApps)
		}
		if r.Usage["controller"].PeakRSSBytes == 0 || r.Requests["POST"] < 200 {
			t.Errorf("%s: usage %v, requests %v", tr, r.Usage, r.Requests)
		}
		n := float64(r.Applications)
		if r.FloorCPU <= 0 || r.SyncedCPU <= 0 || r.FloorRequests["POST applications"] != n ||
			r.FloorRequests["PATCH applications"] != n || r.SyncedRequests["POST applications"] < n {
			t.Errorf("%s: cost: floor %.2f CPU s, fleet %.2f CPU s; floor requests %v; fleet requests %v",
				tr, r.FloorCPU, r.SyncedCPU, r.FloorRequests, r.SyncedRequests)
		}
		// A deleted Application costs the hub one GET, the garbage collector's: the controller does not ask
		// the hub again about an Application it saw deleted.
		if r.SyncedProcessCPU["controller"] <= 0 || r.SyncedProcessCPU[simulatorProcess] <= 0 || r.AppBytes < 1000 ||
			r.FloorAppBytes < 1000 || r.FloorAPIServerPeakRSS == 0 || r.DeleteRequests["DELETE applications"] < n || r.DeleteRequests["GET applications"] > 1.1*n {
			t.Errorf("%s: CPU until Synced %v, Application size %d (floor %d), floor apiserver peak RSS %d, delete requests %v",
				tr, r.SyncedProcessCPU, r.AppBytes, r.FloorAppBytes, r.FloorAPIServerPeakRSS, r.DeleteRequests)
		}
		// The delete floor deletes each Application and takes its finalizer off: one DELETE and one PATCH each.
		if r.DeleteFloor <= 0 || r.DeleteRatio() <= 0 || r.DeleteFloorRequests["DELETE applications"] != n ||
			r.DeleteFloorRequests["PATCH applications"] != n || r.DeleteFloorProcessCPU["kube-apiserver"] <= 0 {
			t.Errorf("%s: delete floor %s, requests %v, CPU %v", tr, r.DeleteFloor, r.DeleteFloorRequests, r.DeleteFloorProcessCPU)
		}
		// The queue exists once the controller has started, after its caches synced: the last sample reads it.
		if len(r.Timeline) == 0 || r.Timeline[len(r.Timeline)-1].ControllerQueue < 0 {
			t.Errorf("%s: the controller's work queue was not read by the end of the timeline (%d samples)", tr, len(r.Timeline))
		}
		if tr == "grpc" && (r.Console == nil || r.Console.Streams != sc.Clusters || r.Console.Samples != r.Applications ||
			r.Console.TreeP50 <= 0 || r.Console.LiveP50 <= 0 || r.Console.ServerRSSBytes == 0) {
			t.Errorf("%s: console %+v", tr, r.Console)
		}
		// A restarted controller or server learns the fleet again and writes no Application; a restarted
		// controller delivers nothing to the clusters either. (After the server's restart an agent client that sdk-go
		// left on its closed connection is restarted, lists its works again and reports them once more.)
		if want := map[string]int{"grpc": 2, "kube": 1}[tr]; len(r.Restarts) != want {
			t.Errorf("%s: %d restarts measured, want %d", tr, len(r.Restarts), want)
		}
		for _, rr := range r.Restarts {
			if rr.Ready <= 0 || rr.CaughtUp < rr.Ready || rr.Settled < rr.CaughtUp || rr.applicationWrites() != 0 ||
				(rr.Process == "controller" && rr.WorksApplied != 0) || rr.ProcessCPU[rr.Process] <= 0 || rr.PeakRSS == 0 {
				t.Errorf("%s: restart of the %s: %+v", tr, rr.Process, rr)
			}
		}
		// The controller killed halfway through the creates: the new one is streamed its list of Applications (no
		// LIST page) and catches up; its CPU and the killed one's both count as the controller's.
		if k := r.KilledInCreate; k == nil || k.Created < r.Applications/2 || k.Ready <= 0 || k.Listed <= 0 || k.Reconciling < k.Listed-time.Second ||
			k.CaughtUp < k.Reconciling || k.Requests[streamedLists] < 1 || k.Requests["LIST applications"] != 0 || k.KilledCPU <= 0 ||
			k.PeakRSS == 0 || r.SyncedProcessCPU["controller"] <= k.KilledCPU {
			t.Errorf("%s: controller killed in the creates: %+v; controller CPU until Synced %.2f s", tr, k, r.SyncedProcessCPU["controller"])
		}
		results = append(results, r)
	}
	for _, plot := range []func([]*Result, string) error{plotProgress, plotMemory} {
		path := filepath.Join(dir, "plot.png")
		if err := plot(results, path); err != nil {
			t.Fatal(err)
		}
		if info, err := os.Stat(path); err != nil || info.Size() < 1000 {
			t.Fatalf("plot: %v", err)
		}
	}
	if _, err := json.Marshal(results); err != nil {
		t.Fatalf("results do not encode: %v", err)
	}
	table := markdown(results, "test", loopback.Machine())
	tableHas(t, table, "20 × 10, grpc", "20 × 10, kube", "ratio to the floor", "controller: peak RSS", "delete: ratio to the delete floor",
		"controller restarted at rest", "server restarted at rest", "controller killed (SIGKILL) in the creates")
}

// TestCountEventWriters: the Events last written in the rest window, by the component that wrote them (the
// reporting controller, else the source), whatever time field carries the last write; earlier and later ones
// are left out.
func TestCountEventWriters(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 33, 54, 500e6, time.UTC)
	end := start.Add(time.Minute)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(start.Add(d)) }
	events := []corev1.Event{
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(-time.Hour)}, LastTimestamp: at(10 * time.Second),
			Source: corev1.EventSource{Component: "placement-controller"}},
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(20 * time.Second)}, Source: corev1.EventSource{Component: "placement-controller"}},
		// Its times have a second's resolution: 10:33:54 is in a window that starts at 10:33:54.5.
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(-500 * time.Millisecond)}, ReportingController: "argocd-pull"},
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(-time.Hour)}, EventTime: metav1.NewMicroTime(start.Add(30 * time.Second))},
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(-time.Hour)}, ReportingController: "series",
			Series: &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(start.Add(40 * time.Second))}},
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(-time.Hour)}, LastTimestamp: at(-2 * time.Second), ReportingController: "before"},
		{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(2 * time.Minute)}, ReportingController: "after"},
	}
	got := countEventWriters(events, start, end)
	want := map[string]int{"placement-controller": 2, "argocd-pull": 1, "unknown": 1, "series": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("writers: got %v, want %v", got, want)
	}
	if text := eventWritersText(got); text != "; placement-controller 2, argocd-pull 1, series 1, unknown 1" {
		t.Errorf("text: %q", text)
	}
	if text := eventWritersText(nil); text != "" {
		t.Errorf("text of none: %q", text)
	}
}

// TestSummarizeLatency: the percentiles, the hub's part, the count over a second and the slowest changes, slowest
// first, with the time they were made from the phase's start.
func TestSummarizeLatency(t *testing.T) {
	start := time.Now()
	var samples []latencySample
	for i := range 200 {
		total := time.Duration(i+1) * 10 * time.Millisecond // 10 ms … 2 s
		samples = append(samples, latencySample{ChangedAt: start.Add(time.Duration(i) * time.Second), Total: total, Hub: total / 2})
	}
	res := &Result{}
	summarizeLatency(samples, start, res)
	if res.LatencySamples != 200 || res.LatencyP50 != 1000*time.Millisecond || res.LatencyP99 != 1980*time.Millisecond ||
		res.LatencyHubP99 != 990*time.Millisecond || res.LatencyMax != 2*time.Second || res.LatencyOverSecond != 100 {
		t.Errorf("summary: %+v", res)
	}
	if len(res.LatencySlowest) != slowestKept || res.LatencySlowest[0] != (slowChange{At: 199 * time.Second, Total: 2 * time.Second, Hub: time.Second}) ||
		res.LatencySlowest[slowestKept-1].Total != 1910*time.Millisecond {
		t.Errorf("slowest: %v", res.LatencySlowest)
	}
}

// TestMarkdownStoppedRun checks that a run stopped before the end says so and shows no end-to-end time.
func TestMarkdownStoppedRun(t *testing.T) {
	done := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "kube"}, Floor: 10 * time.Second, Synced: 25 * time.Second}
	stopped := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "grpc", Concurrency: 64, Creators: 16}, Floor: 10 * time.Second,
		CreateTime: 4 * time.Second, Stopped: "3×2 grpc: context canceled"}
	table := markdown([]*Result{done, stopped}, "make bench", "test machine")
	tableHas(t, table,
		"| stopped before the end | no | 3×2 grpc: context canceled |",
		"| every hub Application Synced/Healthy | 25s | – |",
		"| ratio to the floor | 2.50× | – |",
		"| Applications created | – | 4s (16 clients) |",
		"| at rest: status events / min | 0 | – |",
		"| orphaned works | – | – |")
	if strings.Contains(markdown([]*Result{done}, "make bench", "test machine"), "stopped") {
		t.Error("a finished run's table mentions a stop")
	}
}

// TestMarkdownStoppedInDelete checks that a run stopped in its delete says how far the delete got, and gives its
// CPU and requests per Application gone by then, not per Application created; a finished delete's row is left out.
func TestMarkdownStoppedInDelete(t *testing.T) {
	stopped := &Result{Scenario: Scenario{Clusters: 10, AppSets: 10, Transport: "grpc"}, Applications: 100,
		SyncedProcessCPU: map[string]float64{"kube-apiserver": 3, "controller": 1},
		DeleteStopped:    90 * time.Second, DeleteGone: 40, Stopped: "10×10 grpc: context canceled",
		DeleteProcessCPU: map[string]float64{"kube-apiserver": 0.8, "controller": 0.2},
		DeleteRequests:   requestCounts{"DELETE applications": 40, "PATCH applications": 44}}
	finished := &Result{Scenario: Scenario{Clusters: 10, AppSets: 10, Transport: "kube"}, Applications: 100,
		SyncedProcessCPU: map[string]float64{"kube-apiserver": 3, "controller": 1},
		DeleteApps:       time.Minute, DeleteGone: 100, DeleteFloor: 30 * time.Second,
		DeleteProcessCPU:      map[string]float64{"kube-apiserver": 2, "controller": 1},
		DeleteFloorProcessCPU: map[string]float64{"kube-apiserver": 1.5},
		DeleteRequests:        requestCounts{"DELETE applications": 100, "PATCH applications": 100}}
	table := markdown([]*Result{stopped, finished}, "make bench", "test machine")
	tableHas(t, table,
		"| delete stopped before its end: after; Applications gone from the hub by then | 1m30s; 40 of 100 | – |",
		"| delete: no Application anywhere | – | 1m0s |",
		"| hub-side CPU ms per deleted Application: fleet / delete floor | 25.0 / – | 30.0 / 15.0 (2.00×) |",
		"|   CPU ms per deleted Application: kube-apiserver (fleet / delete floor) | 20.0 / – | 20.0 / 15.0 |",
		"| hub requests per deleted Application: PATCH applications (fleet / delete floor) | 1.10 / 0.00 | 1.00 / 0.00 |",
		"| orphaned works | – | 0 |")
	if strings.Contains(markdown([]*Result{finished}, "make bench", "test machine"), "delete stopped") {
		t.Error("a finished delete's table has the row of a stopped one")
	}
}

// TestMarkdownMemoryLimits checks that the table gives the containers' memory limits as set, "none" where a run
// set none, and leaves the rows out when no run set any.
func TestMarkdownMemoryLimits(t *testing.T) {
	limited := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "grpc", ControllerMemoryLimit: 1 << 30,
		ServerMemoryLimit: 512 << 20, HubAPIServerMemoryLimit: 11 << 30}}
	unlimited := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "kube"}}
	table := markdown([]*Result{limited, unlimited}, "make bench", "test machine")
	tableHas(t, table,
		"| container memory limit as set (GOMEMLIMIT 90 % of it): controller / server | 1024 MiB / 512 MiB | none / none |",
		"| hub apiserver: container memory limit as set (GOMEMLIMIT 90 % of it) | 11264 MiB | none |")
	if strings.Contains(markdown([]*Result{unlimited}, "make bench", "test machine"), "memory limit") {
		t.Error("a table without limits has a row of them")
	}
}

// TestClosedWatches: the apiserver's closures of too-slow watches are counted by resource, and the table shows
// those of Applications and of ManifestWorks beside their LISTs, and the lists of Applications streamed, as
// measured.
func TestClosedWatches(t *testing.T) {
	counts := scrapedRequests(t,
		`# TYPE apiserver_terminated_watchers_total counter`,
		`apiserver_terminated_watchers_total{resource="applications.argoproj.io"} 18`,
		`apiserver_terminated_watchers_total{resource="manifestworks.work.open-cluster-management.io"} 127`,
		`apiserver_request_total{code="200",component="apiserver",group="work.open-cluster-management.io",resource="manifestworks",scope="cluster",subresource="",verb="LIST",version="v1"} 7`,
		`apiserver_request_total{code="200",component="apiserver",group="argoproj.io",resource="applications",scope="cluster",subresource="",verb="LIST",version="v1alpha1"} 1`,
		`apiserver_watch_list_duration_seconds_count{component="",group="argoproj.io",resource="applications",scope="namespace",version="v1alpha1"} 2`,
		`apiserver_watch_list_duration_seconds_count{component="",group="argoproj.io",resource="applications",scope="cluster",version="v1alpha1"} 3`,
	)
	if counts[closedWatches] != 18 || counts[closedWorkWatches] != 127 || counts["LIST manifestworks"] != 7 || counts[streamedLists] != 5 {
		t.Fatalf("counts %v", counts)
	}
	r := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "kube"}, Floor: 10 * time.Second, Synced: 25 * time.Second,
		SyncedRequests: counts, DeleteRequests: counts.sub(requestCounts{closedWorkWatches: 100, "LIST manifestworks": 5})}
	table := markdown([]*Result{r}, "make bench", "test machine")
	tableHas(t, table,
		"| hub apiserver: watches of Applications closed as too slow / lists of Applications streamed / LIST pages of Applications, until Synced | 18 / 5 / 1 |",
		"| hub apiserver: watches of ManifestWorks closed as too slow / LISTs of ManifestWorks, until Synced | 127 / 7 |",
		"| hub apiserver: watches of ManifestWorks closed as too slow / LISTs of ManifestWorks, in the delete | 27 / 2 |")
}

// scrapedRequests is what hubRequests reads from an apiserver whose metrics are lines.
func scrapedRequests(t *testing.T, lines ...string) requestCounts {
	t.Helper()
	metrics := strings.Join(lines, "\n") + "\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(metrics)) }))
	defer srv.Close()
	counts, err := hubRequests(context.Background(), &rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// TestRefusedWrites: the writes the apiserver answered with an error are counted apart by resource, among the
// writes, and the table gives them beside a restart's writes and those at rest.
func TestRefusedWrites(t *testing.T) {
	counts := scrapedRequests(t,
		`apiserver_request_total{code="201",component="apiserver",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2`,
		`apiserver_request_total{code="403",component="apiserver",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 4`,
		`apiserver_request_total{code="404",component="apiserver",group="argoproj.io",resource="applications",scope="resource",subresource="",verb="GET",version="v1alpha1"} 9`,
		`apiserver_request_total{code="500",component="apiserver",group="argoproj.io",resource="applications",scope="resource",subresource="",verb="PATCH",version="v1alpha1"} 1`,
		`apiserver_request_total{code="200",component="apiserver",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3`,
	)
	writes, refusedWrites := counts.writesByResource(1), counts.refusedByResource(1)
	if !maps.Equal(writes, map[string]float64{"events": 6, "applications": 1, "leases": 3}) {
		t.Errorf("writes %v", writes)
	}
	if !maps.Equal(refusedWrites, map[string]float64{"events": 4, "applications": 1}) {
		t.Errorf("refused writes %v (a GET answered 404 is no write)", refusedWrites)
	}
	r := &Result{Scenario: Scenario{Clusters: 3, AppSets: 2, Transport: "kube", Restart: true}, Synced: time.Minute,
		RestRefusedWrites: map[string]float64{"events": 2},
		Restarts:          []restartResult{{Process: "controller", HubWrites: writes, RefusedWrites: refusedWrites}}}
	tableHas(t, markdown([]*Result{r}, "make bench", "test machine"),
		"| at rest: hub writes / min (without the apiserver's own lease renewals; refused); Events written, by writer | 0 (refused: events 2) |",
		"|   its hub writes by resource (refused; Events by writer); works applied and statuses sent by the clusters | events 6, leases 3, applications 1 (refused: events 4, applications 1); 0, 0 |")
}

// TestPSSTree: the proportional set size of a process tree is read, and its peak is the highest sum read;
// within the interval the sizes are not read again, the CPU seconds are.
func TestPSSTree(t *testing.T) {
	read := pssTree(os.Getpid(), 0)
	held := pssTree(os.Getpid(), time.Hour)
	first, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if first.RSSBytes <= 0 || first.PeakRSSBytes != first.RSSBytes {
		t.Fatalf("first read %+v", first)
	}
	heldFirst, err := held()
	if err != nil {
		t.Fatal(err)
	}
	ballast := make([]byte, 64<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	// Half a second of CPU, which the held reader must see.
	for start := time.Now(); time.Since(start) < 500*time.Millisecond; {
		ballast[rand.IntN(len(ballast))]++
	}
	second, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if second.PeakRSSBytes < first.RSSBytes+32<<20 || second.PeakRSSBytes < second.RSSBytes {
		t.Fatalf("after 64 MiB more: %+v (first %+v)", second, first)
	}
	heldSecond, err := held()
	if err != nil {
		t.Fatal(err)
	}
	if heldSecond.RSSBytes != heldFirst.RSSBytes || heldSecond.PeakRSSBytes != heldFirst.PeakRSSBytes {
		t.Errorf("sizes read again within the interval: %+v, then %+v", heldFirst, heldSecond)
	}
	if heldSecond.CPUSeconds < heldFirst.CPUSeconds+0.2 {
		t.Errorf("CPU seconds not read again within the interval: %.2f, then %.2f", heldFirst.CPUSeconds, heldSecond.CPUSeconds)
	}
	_ = ballast[len(ballast)-1]
}

// TestCommandLine: the results say the command that made them, flags included.
func TestCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-out", "docs/bench"}, "make bench"},
		{[]string{"-out", "docs/bench", "-pprof", "-keep"}, `make bench BENCH_FLAGS="-pprof -keep"`},
		{[]string{"-scale", "300x50=grpc"}, "go run ./test/bench -scale 300x50=grpc"},
		{nil, "go run ./test/bench"},
	} {
		if got := commandLine(tt.args); got != tt.want {
			t.Errorf("commandLine(%q) = %s, want %s", tt.args, got, tt.want)
		}
	}
}

// TestTreeUsageKeepsExitedChildren: a process tree's CPU seconds keep those of a child that has exited (a
// PostgreSQL backend that closed), so they never go down.
func TestTreeUsageKeepsExitedChildren(t *testing.T) {
	before, err := treeUsage(os.Getpid(), descendants(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	spent := spendInChild(t, 1000000)
	if spent < 0.1 {
		t.Fatalf("the child spent %.2fs of CPU, too little to tell", spent)
	}
	after, err := treeUsage(os.Getpid(), descendants(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	// The child's own count and /proc's ticks are rounded differently: allow a tick each way.
	if got := after.CPUSeconds - before.CPUSeconds; got < spent-0.02 {
		t.Fatalf("the tree's CPU grew by %.2fs while its exited child spent %.2fs", got, spent)
	}
}

// TestPostgresStatements: with -pprof the fleet's PostgreSQL loads pg_stat_statements (its settings survive a
// restart), and a CPU phase writes the statements it ran, the most expensive first, without those of the
// phase before.
func TestPostgresStatements(t *testing.T) {
	ctx := context.Background()
	pg, err := loopback.StartPostgres(ctx, t.TempDir(), postgresStatementSettings...)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	url, err := pg.CreateDatabase(ctx, "argocd_pull")
	if err != nil {
		t.Fatal(err)
	}
	if err := enableStatements(ctx, url); err != nil {
		t.Fatal(err)
	}
	run := func(query string) {
		if err := withPostgres(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, query)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := newProfiler(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	p.postgres = url
	run("CREATE TABLE before_phase (id int)")
	p.resetStatements(ctx)
	run("CREATE TABLE works (id int)")
	for range 3 {
		run("INSERT INTO works SELECT generate_series(1, 1000)")
	}
	p.writeStatements(ctx, "sync")
	b, err := os.ReadFile(filepath.Join(p.dir, "sync-postgres-statements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if !strings.Contains(out, "INSERT INTO works") || !strings.Contains(out, "3000") || strings.Contains(out, "before_phase") {
		t.Errorf("statements of the phase:\n%s", out)
	}
	pg.Stop()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var libraries string
	if err := withPostgres(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libraries)
	}); err != nil {
		t.Fatal(err)
	}
	if libraries != "pg_stat_statements" {
		t.Errorf("after a restart, shared_preload_libraries = %q", libraries)
	}
}

// TestOwnUsageLeavesOutChildren: the benchmark's own CPU leaves out the children it waited for (a controller it
// killed), which processUsage counts for PostgreSQL's closed backends.
func TestOwnUsageLeavesOutChildren(t *testing.T) {
	read := func() (own, all float64) {
		t.Helper()
		o, err := ownUsage()
		if err != nil {
			t.Fatal(err)
		}
		a, err := processUsage(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return o.CPUSeconds, a.CPUSeconds
	}
	ownBefore, allBefore := read()
	child := spendInChild(t, 400000)
	ownAfter, allAfter := read()
	own, all := ownAfter-ownBefore, allAfter-allBefore
	if all < 0.8*child || own > all-0.8*child {
		t.Fatalf("a child spent %.2f s: the process with its children %.2f s more, without them %.2f s more", child, all, own)
	}
}

// spendInChild runs a child that counts to n in the shell, waits for it and returns the CPU seconds it spent.
func spendInChild(t *testing.T, n int) float64 {
	t.Helper()
	child := exec.Command("sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); done", n)) //nolint:gosec // a number
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	return (child.ProcessState.UserTime() + child.ProcessState.SystemTime()).Seconds()
}

// tableHas fails the test for each of the rows or cells the table lacks.
func tableHas(t *testing.T, table string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestRetried: a request that failed for a transient reason is sent again, one whose earlier attempt took effect
// after all ends as a success, and anything else fails at once.
func TestRetried(t *testing.T) {
	ctx := context.Background()
	// What the hub apiserver answered a create while etcd stalled: an error that is not a Status, as a 500.
	etcdTimeout := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
		Reason: metav1.StatusReasonUnknown, Message: "etcdserver: request timed out"}}
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Group: "argoproj.io", Resource: "applications"}, "app")
	invalid := apierrors.NewBadRequest("spec.destination: Required value")
	for _, tc := range []struct {
		name        string
		answers     []error
		tookEffect  func(error) bool
		wantErr     error
		wantSent    int
		wantRetries int64
	}{
		{"first time", []error{nil}, apierrors.IsAlreadyExists, nil, 1, 0},
		{"after two etcd timeouts", []error{etcdTimeout, etcdTimeout, nil}, apierrors.IsAlreadyExists, nil, 3, 2},
		{"created by the attempt that timed out", []error{etcdTimeout, exists}, apierrors.IsAlreadyExists, nil, 2, 1},
		{"exists at the first attempt", []error{exists}, apierrors.IsAlreadyExists, exists, 1, 0},
		{"not transient", []error{invalid}, apierrors.IsAlreadyExists, invalid, 1, 0},
		{"throttled, then dropped", []error{apierrors.NewTooManyRequests("slow down", 0), io.ErrUnexpectedEOF, nil}, nil, nil, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var retries atomic.Int64
			sent := 0
			err := retried(ctx, &retries, func() error {
				sent++
				return tc.answers[sent-1]
			}, tc.tookEffect)
			if !errors.Is(err, tc.wantErr) || sent != tc.wantSent || retries.Load() != tc.wantRetries {
				t.Fatalf("err %v, sent %d, retries %d; want %v, %d, %d", err, sent, retries.Load(), tc.wantErr, tc.wantSent, tc.wantRetries)
			}
		})
	}
	t.Run("gives up", func(t *testing.T) {
		var retries atomic.Int64
		sent := 0
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := retried(ctx, &retries, func() error {
			if sent++; sent == 3 {
				cancel() // the run is stopped: no more waiting
			}
			return etcdTimeout
		}, nil)
		if !errors.Is(err, etcdTimeout) || sent != 3 {
			t.Fatalf("err %v after %d sends; want the etcd timeout after 3", err, sent)
		}
	})
}
