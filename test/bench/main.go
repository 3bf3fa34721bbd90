// Command bench is `make bench`: it runs the 150,000-Application benchmark on this machine. For each scale it
// measures the floor (the hub apiserver creating the Applications and writing each status once) and the delete
// floor (deleting them and taking their finalizer off), then runs a fleet — the hub apiserver and etcd,
// PostgreSQL and argocd-pull server in the Maestro mode, the hub controller, and argocd-pull's fleet simulator
// in a process of its own — creates the Applications as the ApplicationSet controller would, and measures
// delivery, status on the hub, the fleet at rest, status latency under churn, deletion, requests, CPU and
// memory. It writes a markdown table, JSON and PNG plots.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// scale is one -scale flag: clusters × Applications per cluster, and the transports to run.
type scale struct {
	clusters, appSets int
	transports        []string
}

type scales []scale

func (s *scales) String() string { return fmt.Sprint(*s) }

// Set parses "300x50=grpc,kube".
func (s *scales) Set(v string) error {
	size, transports, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("scale %q: want CLUSTERSxAPPS=TRANSPORT[,TRANSPORT]", v)
	}
	c, a, ok := strings.Cut(size, "x")
	clusters, err1 := strconv.Atoi(c)
	apps, err2 := strconv.Atoi(a)
	if !ok || err1 != nil || err2 != nil || clusters < 1 || apps < 1 {
		return fmt.Errorf("scale %q: want CLUSTERSxAPPS=TRANSPORT[,TRANSPORT]", v)
	}
	*s = append(*s, scale{clusters: clusters, appSets: apps, transports: strings.Split(transports, ",")})
	return nil
}

type options struct {
	scales         scales
	out, workDir   string
	keep           bool
	base           Scenario
	latencyUpTo    int
	watchCacheUpTo int
	skipFloor      bool
	console        bool
	cgroups        bool
	cpuRequests    cpuRequests
}

func main() {
	// The controller and the server run as in containers with issue 16's memory targets as their limits: the
	// peak RSS then tells whether they hold, at the collector's cost that such a container pays.
	o := options{base: Scenario{Concurrency: 64, QPS: 1000, Burst: 2000, SyncDelay: 5 * time.Second,
		Settle: 15 * time.Second, RestPeriod: time.Minute, Latency: time.Minute, LatencyRate: 20,
		ControllerMemoryLimit: 1 << 30, ServerMemoryLimit: 512 << 20}}
	flag.Var(&o.scales, "scale", "CLUSTERSxAPPS=TRANSPORT[,TRANSPORT], repeatable (default 300x50=grpc,kube and 3000x50=grpc)")
	flag.StringVar(&o.out, "out", "docs/bench", "Directory for results.md, results.json and the plots")
	flag.StringVar(&o.workDir, "work-dir", "", "Directory for the fleets' state and logs (a temporary one when empty)")
	flag.BoolVar(&o.keep, "keep", false, "Keep the work directory (a run that fails keeps it anyway)")
	flag.IntVar(&o.base.Concurrency, "concurrency", o.base.Concurrency, "Concurrent clients (Application creates) and controller workers")
	flag.IntVar(&o.base.Creators, "creators", 0, "Concurrent clients that create the Applications, in the floor and the fleet (default -concurrency)")
	flag.Func("qps", "Client QPS of the controller and of the floor (default 1000)", func(v string) error {
		f, err := strconv.ParseFloat(v, 32)
		o.base.QPS = float32(f)
		return err
	})
	flag.IntVar(&o.base.Burst, "burst", o.base.Burst, "Client burst of the controller and of the floor")
	flag.DurationVar(&o.base.SyncDelay, "sync-delay", o.base.SyncDelay, "How long a simulated sync takes")
	flag.DurationVar(&o.base.Settle, "settle", o.base.Settle, "How long the hub must take no writes (lease renewals aside) before the fleet counts as at rest")
	flag.DurationVar(&o.base.RestPeriod, "rest", o.base.RestPeriod, "How long the fleet is watched at rest")
	flag.DurationVar(&o.base.Latency, "latency", o.base.Latency, "How long status latency is measured under churn")
	flag.Float64Var(&o.base.LatencyRate, "latency-rate", o.base.LatencyRate, "Status changes per second while latency is measured")
	flag.IntVar(&o.latencyUpTo, "latency-up-to", 20000, "Measure status latency at scales up to this many Applications")
	flag.IntVar(&o.watchCacheUpTo, "watch-cache-up-to", 20000,
		"Keep the hub apiserver's watch cache of Applications at scales up to this many Applications; above, it is off")
	flag.BoolVar(&o.base.Pprof, "pprof", false, "Profile the controller, the server, the hub apiserver, the simulator and the benchmark process (its tracker): "+
		"CPU while the Applications are created and synced, over each restart and while they are deleted, heap when Synced/Healthy, at rest "+
		"and a restarted process's heap nearest its peak RSS; "+
		"written with their top functions to -pprof-dir; in the Maestro mode also PostgreSQL's statements of each CPU phase (pg_stat_statements)")
	flag.StringVar(&o.base.PprofDir, "pprof-dir", "", "Directory of the profiles of -pprof (default OUT/pprof)")
	flag.BoolVar(&o.skipFloor, "skip-floor", false, "Do not measure the floor (for profiling runs)")
	flag.BoolVar(&o.base.SkipDeleteFloor, "skip-delete-floor", false, "Measure the floor without the delete floor (for runs stopped as the fleet's delete begins)")
	flag.BoolVar(&o.base.FloorOnly, "floor-only", false, "Measure the floor alone (what the hub apiserver needs, with -watch-cache-up-to, say)")
	flag.Func("hub-apiserver-arg", "An extra flag of the hub apiserver, for the floor and the fleet (repeatable; -v=1, say, to see which watchers it closes)", func(v string) error {
		o.base.HubAPIServerArgs = append(o.base.HubAPIServerArgs, v)
		return nil
	})
	memoryLimit := func(target *int64) func(string) error {
		return func(v string) error {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return err
			}
			*target = q.Value()
			return nil
		}
	}
	flag.Func("controller-memory-limit", "Run the controller as under a container memory limit of this size (default 1Gi; 0: none): GOMEMLIMIT at 90 % of it, as argocd-pull sets from its container's limit",
		memoryLimit(&o.base.ControllerMemoryLimit))
	flag.Func("server-memory-limit", "Run argocd-pull server as under a container memory limit of this size (default 512Mi; 0: none; GOMEMLIMIT at 90 % of it)",
		memoryLimit(&o.base.ServerMemoryLimit))
	flag.Func("hub-apiserver-memory-limit", "Run the hub apiserver, for the floor and the fleet, as under a container memory limit of this size with GOMEMLIMIT at 90 % of it (default 0: none; with its watch cache on at 150,000, say)",
		memoryLimit(&o.base.HubAPIServerMemoryLimit))
	flag.BoolVar(&o.base.Restart, "restart", true, "Restart the controller and, in the Maestro mode, the server at rest (SIGKILL), and measure what each took to catch up and what it wrote")
	flag.Func("kill-controller-at", "SIGKILL the controller once this share of the Applications is created (0.5, say), start it again at once, and measure its list of every Application under the creates' load (default 0: not)",
		func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return fmt.Errorf("want a share between 0 and 1, got %q", v)
			}
			o.base.KillControllerAt = f
			return nil
		})
	o.cpuRequests = cpuRequests{}
	flag.BoolVar(&o.cgroups, "cgroups", false, "Run each measured process in a CPU cgroup of its own (cgroup v1, as root) with the cpu.shares a kubelet gives its CPU request: "+
		"by default "+cpuRequests(defaultCPURequests).String()+" (a kubeadm control plane's and the hub chart's requests)")
	flag.Var(o.cpuRequests, "cpu-request", "NAME=QUANTITY: with -cgroups, the CPU request of one process (controller=1, say; repeatable; implies -cgroups)")
	flag.BoolVar(&o.console, "console", true, "In the Maestro mode, open the simulated clusters' console streams and measure the hub console's reads at rest")
	flag.Parse()
	if len(o.scales) == 0 {
		o.scales = scales{{300, 50, []string{"grpc", "kube"}}, {3000, 50, []string{"grpc"}}}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o *options) run(ctx context.Context) (err error) {
	if o.workDir == "" {
		dir, err := os.MkdirTemp("", "argocd-pull-bench-")
		if err != nil {
			return err
		}
		o.workDir = dir
	}
	if err := os.MkdirAll(o.workDir, 0o750); err != nil {
		return err
	}
	// A run that failed keeps its work directory: its processes' logs say why (a restarted controller that
	// exited at 150,000 took its log with it once).
	defer func() {
		if err != nil {
			fmt.Fprintf(os.Stderr, "the work directory, with every process's log, is kept: %s\n", o.workDir)
		} else if !o.keep {
			_ = os.RemoveAll(o.workDir)
		}
	}()
	if err := os.MkdirAll(o.out, 0o750); err != nil {
		return err
	}
	closeLog, err := loopback.LogToFile(filepath.Join(o.workDir, "bench.log"))
	if err != nil {
		return err
	}
	defer closeLog()
	logf := func(format string, args ...any) {
		fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	logf("building argocd-pull")
	bin, err := loopback.BuildArgocdPull(ctx, o.workDir)
	if err != nil {
		return err
	}
	if o.base.Pprof {
		if o.base.BenchmarkPprof, err = servePprof(ctx, logf); err != nil {
			return err
		}
		if o.base.PprofDir == "" {
			o.base.PprofDir = filepath.Join(o.out, "pprof")
		}
	}
	if o.cgroups || len(o.cpuRequests) > 0 {
		cg, err := newCgroups(o.cpuRequests)
		if err != nil {
			return err
		}
		defer func() {
			if err := cg.close(); err != nil {
				logf("removing the cgroups: %v", err)
			}
		}()
		o.base.Cgroups, o.base.CPURequests = cg, cg.requests
		logf("each process in a CPU cgroup of its own, its cpu.shares from its request: %s", cg.requests)
	}
	var all []*Result
	var tables []string
	for _, s := range o.scales {
		var results []*Result
		for _, tr := range s.transports {
			sc := o.base
			sc.Transport, sc.Clusters, sc.AppSets, sc.Binary, sc.SkipFloor = tr, s.clusters, s.appSets, bin, o.skipFloor
			sc.Dir = filepath.Join(o.workDir, fmt.Sprintf("%dx%d-%s", s.clusters, s.appSets, tr))
			if s.clusters*s.appSets > o.latencyUpTo {
				sc.Latency = 0
			}
			sc.NoWatchCache = s.clusters*s.appSets > o.watchCacheUpTo
			sc.Console = o.console && tr == workclient.TransportGRPC
			sc.Log = func(format string, args ...any) {
				logf("[%d×%d %s] "+format, append([]any{s.clusters, s.appSets, tr}, args...)...)
			}
			r, err := run(ctx, sc)
			if err != nil {
				err = fmt.Errorf("%d×%d %s: %w", s.clusters, s.appSets, tr, err)
				if r == nil {
					return err
				}
				// A run that stopped early still reports what it measured.
				r.Stopped = err.Error()
				results = append(results, r)
				if werr := o.write(s, results, &all, &tables); werr != nil {
					return errors.Join(err, werr)
				}
				return err
			}
			results = append(results, r)
		}
		if err := o.write(s, results, &all, &tables); err != nil {
			return err
		}
	}
	fmt.Println(strings.Join(tables, "\n"))
	return nil
}

// write plots a scale's results and writes the results so far: a long run that is stopped keeps what it
// measured.
func (o *options) write(s scale, results []*Result, all *[]*Result, tables *[]string) error {
	name := fmt.Sprintf("%dx%d", s.clusters, s.appSets)
	if !o.base.FloorOnly {
		if err := plotProgress(results, filepath.Join(o.out, name+"-progress.png")); err != nil {
			return err
		}
		if err := plotMemory(results, filepath.Join(o.out, name+"-memory.png")); err != nil {
			return err
		}
	}
	*all = append(*all, results...)
	*tables = append(*tables, markdown(results, commandLine(os.Args[1:]), loopback.Machine()))
	return writeResults(o.out, *all, *tables)
}

// commandLine is how the results were made, with the flags the benchmark was given: `make bench` runs it with
// -out docs/bench and then BENCH_FLAGS.
func commandLine(args []string) string {
	if len(args) < 2 || args[0] != "-out" || args[1] != "docs/bench" {
		return strings.TrimSpace("go run ./test/bench " + strings.Join(args, " "))
	}
	if len(args) == 2 {
		return "make bench"
	}
	return fmt.Sprintf("make bench BENCH_FLAGS=%q", strings.Join(args[2:], " "))
}

// writeResults writes results.md and results.json.
func writeResults(dir string, all []*Result, tables []string) error {
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(strings.Join(tables, "\n")), 0o600); err != nil {
		return err
	}
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), data, 0o600)
}

// servePprof serves this process's Go profiles (the simulated fleet and the tracker run here) on a loopback
// port until ctx ends.
func servePprof(ctx context.Context, logf func(string, ...any)) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	url := fmt.Sprintf("http://%s/debug/pprof/", ln.Addr())
	logf("benchmark pprof: %s", url)
	return url, nil
}
