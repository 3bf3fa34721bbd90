package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/memlimit"
	"github.com/argocd-pull/argocd-pull/internal/sim"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Scenario is one benchmark run.
type Scenario struct {
	Transport string
	Clusters  int
	AppSets   int
	// Concurrency, QPS and Burst are the client settings of both the controller and the floor.
	Concurrency int
	// Creators is how many clients create the Applications, in the floor and the fleet (Concurrency when 0).
	Creators  int
	QPS       float32
	Burst     int
	SyncDelay time.Duration
	// Settle is how long the hub must take no writes (lease renewals aside), once every Application is
	// Synced and Healthy, before the fleet counts as at rest: the reports' last writes trail the rollout.
	Settle time.Duration
	// RestPeriod is how long the fleet is watched at rest.
	RestPeriod time.Duration
	// Latency measures status latency with churn on, for this long (0: skip).
	Latency     time.Duration
	LatencyRate float64
	Binary      string
	Dir         string
	// Console has the simulated clusters open the console stream (sim --console) and argocd-pull server
	// serve the hub console's doors, whose latency is then measured at rest (Maestro mode).
	Console bool
	// Restart restarts the controller and (Maestro mode) the server at rest, one after the other, and measures
	// what each took to catch up and what it wrote (measureRestart).
	Restart bool
	// KillControllerAt, between 0 and 1, SIGKILLs the controller once that share of the Applications is created
	// and starts it again at once, and measures its list of every Application under the creates' load
	// (killInCreate); 0 does not.
	KillControllerAt float64
	// Pprof serves the Go profiles of the controller and the server on loopback ports and, with PprofDir,
	// collects theirs, the hub apiserver's and the simulator's: CPU while the Applications are created and
	// synced and while they are deleted, heap once they are Synced/Healthy and at rest.
	Pprof    bool
	PprofDir string `json:"-"`
	// BenchmarkPprof is the URL of the benchmark process's /debug/pprof/ (the tracker runs there).
	BenchmarkPprof string `json:"-"`
	// SkipFloor leaves the floor out; FloorOnly measures the floor alone; SkipDeleteFloor measures the create
	// floor without the delete floor that follows it (a run stopped as the fleet's delete begins does not need it).
	SkipFloor, FloorOnly, SkipDeleteFloor bool
	// NoWatchCache runs the hub apiserver, for the floor and for the fleet, without its watch cache of
	// Applications: each watch is then served from etcd. At 150,000 Applications the cache (decoded
	// unstructured objects, about 50 KB each) does not fit in 24 GiB beside the rest of the fleet.
	NoWatchCache bool
	// HubAPIServerArgs are extra flags of the hub apiserver, for the floor and the fleet.
	HubAPIServerArgs []string
	// ControllerMemoryLimit and ServerMemoryLimit, in bytes, are the containers' memory limits the controller
	// and the server run as if under (0: none): each gets the soft limit its container would give it
	// (GOMEMLIMIT at memlimit.Fraction of the limit). Nothing kills a process above it here; the peak RSS tells.
	ControllerMemoryLimit, ServerMemoryLimit int64
	// HubAPIServerMemoryLimit, in bytes, is the memory limit of the hub apiserver's container, for the floor and
	// the fleet (0: none): it runs with GOMEMLIMIT at memlimit.Fraction of it, as a hub would set it by hand (the
	// apiserver does not read its container's limit).
	HubAPIServerMemoryLimit int64
	// CPURequests, with -cgroups, are the CPU requests in millicores by process that the processes' cgroups
	// have as cpu.shares (cgroups); nil runs every process in the benchmark's own cgroup.
	CPURequests cpuRequests          `json:",omitempty"`
	Cgroups     *cgroups             `json:"-"`
	Log         func(string, ...any) `json:"-"`
}

// softMemoryLimit is the environment that gives a process the soft memory limit an argocd-pull process takes
// from its container's limit (bytes); none for 0.
func softMemoryLimit(limit int64) []string {
	if limit <= 0 {
		return nil
	}
	return []string{fmt.Sprintf("GOMEMLIMIT=%d", memlimit.Soft(limit))}
}

// Result is what a scenario measured.
type Result struct {
	Scenario     Scenario
	Applications int
	Floor        time.Duration
	// CreateTime is how long creating the Applications took; Delivered and Synced are measured from the
	// first create.
	CreateTime, Delivered, Synced time.Duration
	// Settled is when the hub's writes that trail the rollout (the reports' last ones) ended, from the first
	// create.
	Settled                         time.Duration
	RestStatusEvents, RestHubWrites float64 // per minute
	// RestHubWritesByResource are the writes at rest per minute by resource, and RestRefusedWrites those of
	// them the apiserver answered with an error.
	RestHubWritesByResource map[string]float64
	RestRefusedWrites       map[string]float64 `json:",omitempty"`
	// RestEventWriters counts the Events written at rest by the component that wrote them: the hub takes
	// Events from OCM's and Kubernetes' own controllers too (the placement controller's rescheduling on its
	// informers' resync, say), and these say whose they are.
	RestEventWriters               map[string]int
	LatencyP50, LatencyP99         time.Duration
	LatencySamples, LatencyMissing int
	// LatencyHubP99 is the p99 of the hub's part of the changes' way (from the agent's send to the hub
	// Application), LatencyMax the slowest change, LatencyOverSecond how many took over a second.
	LatencyHubP99, LatencyMax time.Duration
	LatencyOverSecond         int
	// LatencySlowest are the slowest changes, slowest first.
	LatencySlowest []slowChange `json:",omitempty"`
	// LatencyRequests are the hub apiserver's requests while latency was measured.
	LatencyRequests requestCounts `json:",omitempty"`

	DeleteWorks, DeleteApps time.Duration
	// DeleteStopped is how long the delete ran when the run was stopped before it ended, DeleteGone how many
	// Applications had gone from the hub by then (all of them once it ends).
	DeleteStopped time.Duration `json:",omitempty"`
	DeleteGone    int           `json:",omitempty"`
	// DeleteRequests and DeleteProcessCPU are the hub apiserver's requests and each process's CPU seconds
	// from the delete of the ApplicationSets until nothing was left, or until the run was stopped.
	DeleteRequests   requestCounts
	DeleteProcessCPU map[string]float64
	// DeleteFloor is the least the hub apiserver needs to delete the Applications (measureDeleteFloor), on the
	// floor's apiserver; DeleteFloorRequests and DeleteFloorProcessCPU are its requests and its CPU seconds by
	// process (apiserver and etcd).
	DeleteFloor           time.Duration
	DeleteFloorRequests   requestCounts
	DeleteFloorProcessCPU map[string]float64
	Orphans               int
	// Retries are the benchmark's own requests (the floors', the creates) sent again after a transient apiserver
	// error (retried).
	Retries  int64
	Requests requestCounts
	Usage    map[string]usage
	// FloorCPU and FloorRequests are what the floor cost the hub (apiserver and etcd); SyncedCPU and
	// SyncedRequests what the fleet's hub-side processes (the simulator excluded) spent from the first create
	// until every Application was Synced and Healthy: the same work, so per Application they compare.
	FloorCPU, SyncedCPU           float64
	FloorRequests, SyncedRequests requestCounts
	// FloorProcessCPU and SyncedProcessCPU are the same CPU seconds by process.
	FloorProcessCPU, SyncedProcessCPU map[string]float64
	// FloorAPIServerPeakRSS is the floor's hub apiserver's peak RSS: what the hub apiserver needs to hold the
	// Applications and take their writes, whoever writes them.
	FloorAPIServerPeakRSS int64
	// FloorAppBytes and AppBytes are the mean size of a hub Application, as JSON, once its status is written:
	// every write and every watch event of an Application costs the apiserver in proportion to it.
	FloorAppBytes, AppBytes int
	PostgresBytes           int64
	// Console is the console measurement (Scenario.Console), nil without it.
	Console *consoleResult
	// Restarts are the restarts of the controller and (Maestro mode) the server at rest, in that order.
	Restarts []restartResult `json:",omitempty"`
	// KilledInCreate is the controller killed while the Applications were created (Scenario.KillControllerAt).
	KilledInCreate *killResult `json:",omitempty"`
	Timeline       []sample
	// Stopped says why the run ended before its last step; empty when it finished.
	Stopped string
}

// sample is one point of the timeline.
type sample struct {
	At                         time.Duration
	Delivered, Synced          int64
	ControllerRSS, ServerRSS   int64
	APIServerRSS, SimulatorRSS int64
	// PostgresPSS is PostgreSQL's proportional set size, all its processes together.
	PostgresPSS int64
	// ControllerQueue is the depth of the controller's work queue of Applications (-1: not read, as before the
	// controller has started): whether a Synced/Healthy count that stands still waits for the controller or for
	// the benchmark's tracker.
	ControllerQueue int64
}

// Ratio is the end-to-end time over the floor.
func (r *Result) Ratio() float64 {
	if r.Floor == 0 || r.Synced == 0 {
		return 0
	}
	return r.Synced.Seconds() / r.Floor.Seconds()
}

// DeleteRatio is the time to delete every Application over the delete floor's (0 when either is missing).
func (r *Result) DeleteRatio() float64 {
	if r.DeleteFloor == 0 || r.DeleteApps == 0 {
		return 0
	}
	return r.DeleteApps.Seconds() / r.DeleteFloor.Seconds()
}

// run runs a scenario: floor first, on a fresh apiserver, then the fleet.
func run(ctx context.Context, sc Scenario) (*Result, error) {
	res := &Result{Scenario: sc, Applications: sc.Clusters * sc.AppSets, Usage: map[string]usage{}}
	clusters := sim.ClusterNames("cluster", 1, sc.Clusters)

	if !sc.SkipFloor {
		if err := runFloor(ctx, sc, clusters, res); err != nil {
			return nil, err
		}
	}
	if sc.FloorOnly {
		return res, nil
	}

	controllerArgs := []string{fmt.Sprintf("--workers=%d", sc.Concurrency), fmt.Sprintf("--kube-api-qps=%g", sc.QPS),
		fmt.Sprintf("--kube-api-burst=%d", sc.Burst)}
	var serverArgs []string
	pprofPorts := map[string]int{}
	if sc.Pprof {
		ports, err := loopback.FreePorts(2)
		if err != nil {
			return nil, err
		}
		pprofPorts["controller"], pprofPorts["server"] = ports[0], ports[1]
		controllerArgs = append(controllerArgs, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[0]))
		serverArgs = append(serverArgs, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[1]))
		sc.Log("controller pprof: http://127.0.0.1:%d/debug/pprof/", ports[0])
		if sc.Transport == workclient.TransportGRPC {
			sc.Log("server pprof: http://127.0.0.1:%d/debug/pprof/", ports[1])
		}
	}
	f, err := localfleet.Start(ctx, localfleet.Options{
		Dir: filepath.Join(sc.Dir, "fleet"), Clusters: clusters, Transport: sc.Transport, Binary: sc.Binary, Simulated: true,
		SimulatedConsole: sc.Console,
		ControllerArgs:   controllerArgs, ServerArgs: serverArgs, HubAPIServerArgs: sc.hubAPIServerArgs(),
		HubAPIServerEnv:  softMemoryLimit(sc.HubAPIServerMemoryLimit),
		PostgresSettings: sc.postgresSettings(),
		ControllerEnv:    softMemoryLimit(sc.ControllerMemoryLimit), ServerEnv: softMemoryLimit(sc.ServerMemoryLimit),
		Progress: func(s string) { sc.Log("%s", s) },
	})
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	// A hub process that exits ends the run at once with its error, which the results keep; before
	// f.Stop ends them (deferred calls run last first).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.OnExit(ctx, cancel)
	prof, err := sc.profiler(f, pprofPorts)
	if err != nil {
		return nil, err
	}
	return res, measure(ctx, sc, f, clusters, res, prof)
}

// profiler returns the profile collector of a run with -pprof, nil otherwise.
func (sc Scenario) profiler(f *localfleet.System, ports map[string]int) (*profiler, error) {
	if !sc.Pprof || sc.PprofDir == "" {
		return nil, nil
	}
	p, err := newProfiler(filepath.Join(sc.PprofDir, fmt.Sprintf("%dx%d-%s", sc.Clusters, sc.AppSets, sc.Transport)), sc.Log)
	if err != nil {
		return nil, err
	}
	local := &http.Client{}
	p.add("controller", local, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", ports["controller"]))
	if f.Transport == workclient.TransportGRPC {
		p.add("server", local, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", ports["server"]))
	}
	hub, err := rest.HTTPClientFor(f.Env.Hub.Config())
	if err != nil {
		return nil, err
	}
	p.add("kube-apiserver", hub, f.Env.Hub.Config().Host+"/debug/pprof/")
	if f.Env.Postgres != nil {
		p.postgres = f.Env.Postgres.URL("argocd_pull")
		if err := enableStatements(context.Background(), p.postgres); err != nil {
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	if sc.BenchmarkPprof != "" {
		p.add("benchmark", local, sc.BenchmarkPprof)
	}
	return p, nil
}

// postgresSettings are the fleet's extra PostgreSQL settings: with -pprof, pg_stat_statements.
func (sc Scenario) postgresSettings() []string {
	if !sc.Pprof {
		return nil
	}
	return postgresStatementSettings
}

// noWatchCacheCompaction is how often the hub apiserver compacts etcd when it runs without the watch cache of
// Applications: longer than a relist of 150,000 Applications takes under the fleet's load (the benchmark's
// tracker read about one page of 500 every six seconds on two cores while the Applications were created, half
// an hour for all of them). etcd then keeps one to two hours of history, which the loopback etcd's 8 GiB quota
// holds.
const noWatchCacheCompaction = time.Hour

// creators is how many clients create the Applications.
func (sc Scenario) creators() int {
	if sc.Creators > 0 {
		return sc.Creators
	}
	return sc.Concurrency
}

// hubAPIServerArgs are the hub apiserver's extra flags, the same for the floor and the fleet.
func (sc Scenario) hubAPIServerArgs() []string {
	args := append([]string{}, sc.HubAPIServerArgs...)
	if sc.NoWatchCache {
		// Without the cache every list of Applications pages through etcd at the first page's revision, and a
		// watch that falls behind resumes from etcd's history. At 150,000 a relist on a busy hub takes longer
		// than the default five minutes between compactions: its continue token expires, it starts again and
		// never ends. docs/install.md gives hubs the same advice.
		args = append(args, "--watch-cache-sizes=applications.argoproj.io#0", "--etcd-compaction-interval="+noWatchCacheCompaction.String())
	} else {
		args = append(args, cacheGates)
	}
	return args
}

// cacheGates are the watch cache's features Kubernetes 1.34 has on by default and the hub apiserver here, 1.33,
// does not:
//   - ListFromCacheSnapshot has the cache serve every page of a list. Without it the cache serves a list's first
//     page and sends every further page to etcd at the first page's revision. At 150,000 Applications the
//     restarted controller's list then took 1–2.5 s a page of 500 from etcd on two cores, longer than the five
//     minutes between compactions: a page failed with 410 Gone and the list began again (16 minutes in all,
//     2026-11-30).
//   - WatchList has an informer (client-go 0.35 asks for it by default) read its list as the first events of
//     its watch, streamed from the cache, instead of as a list. A paged list still has to end before the cache
//     drops its snapshot and etcd compacts the revision it reads at: during the creates at 150,000 the
//     controller's relist, after its watch ended, did not, and began again for half an hour while it delivered
//     nothing (bc83156, 2026-12-01).
//
// docs/install.md gives 1.33 hubs the same advice.
const cacheGates = "--feature-gates=ListFromCacheSnapshot=true,WatchList=true"

// runFloor measures the floor on a fresh hub apiserver, then the delete floor on the same one.
func runFloor(ctx context.Context, sc Scenario, clusters []string, res *Result) error {
	sc.Log("floor: creating %d Applications and writing each status once on a fresh hub apiserver", res.Applications)
	floorEnv, err := loopback.Start(ctx, loopback.Options{Dir: filepath.Join(sc.Dir, "floor"), HubAPIServerArgs: sc.hubAPIServerArgs(),
		HubAPIServerEnv: softMemoryLimit(sc.HubAPIServerMemoryLimit)})
	if err != nil {
		return err
	}
	defer floorEnv.Stop()
	defer sc.Cgroups.place(map[string]func() []int{
		"kube-apiserver": pidsOf(floorEnv.Hub.Pid), "etcd": pidsOf(floorEnv.EtcdPid), benchmarkProcess: pidsOf(os.Getpid),
	})()
	procs := map[string]func() (usage, error){
		"kube-apiserver": pidUsage(floorEnv.Hub.Pid()),
		"etcd":           pidUsage(floorEnv.EtcdPid()),
	}
	startUsage := usageOf(procs)
	startRequests, err := hubRequests(ctx, floorEnv.Hub.Config())
	if err != nil {
		return err
	}
	var prof *profiler
	if sc.Pprof && sc.PprofDir != "" {
		if prof, err = newProfiler(filepath.Join(sc.PprofDir, fmt.Sprintf("%dx%d-%s", sc.Clusters, sc.AppSets, sc.Transport)), sc.Log); err != nil {
			return err
		}
		hub, err := rest.HTTPClientFor(floorEnv.Hub.Config())
		if err != nil {
			return err
		}
		prof.add("kube-apiserver", hub, floorEnv.Hub.Config().Host+"/debug/pprof/")
	}
	stopProfiling := prof.cpu(ctx, "floor")
	var retries atomic.Int64
	res.Floor, err = measureFloor(ctx, floorEnv.Hub.Config(), clusters, sc.AppSets, sc.creators(), sc.QPS, sc.Burst, &retries)
	res.Retries += retries.Swap(0)
	if err != nil {
		stopProfiling()
		return err
	}
	floorUsage := usageOf(procs)
	res.FloorCPU = hubSideCPU(floorUsage, startUsage)
	res.FloorProcessCPU = processCPU(floorUsage, startUsage)
	res.FloorAPIServerPeakRSS = floorUsage["kube-apiserver"].PeakRSSBytes
	stopProfiling()
	if res.FloorAppBytes, err = meanApplicationBytes(ctx, floorEnv.Hub.Config()); err != nil {
		return err
	}
	end, err := hubRequests(ctx, floorEnv.Hub.Config())
	if err != nil {
		return err
	}
	res.FloorRequests = end.sub(startRequests)
	sc.Log("floor: %s, %.1f CPU s", res.Floor.Round(time.Millisecond), res.FloorCPU)
	if sc.SkipDeleteFloor {
		return nil
	}

	sc.Log("delete floor: deleting the %d Applications and taking their finalizer off", res.Applications)
	startUsage = usageOf(procs)
	stopProfiling = prof.cpu(ctx, "delete-floor")
	res.DeleteFloor, err = measureDeleteFloor(ctx, floorEnv.Hub.Config(), clusters, sc.AppSets, sc.Concurrency, sc.QPS, sc.Burst, &retries)
	res.Retries += retries.Swap(0)
	stopProfiling()
	if err != nil {
		return err
	}
	res.DeleteFloorProcessCPU = processCPU(usageOf(procs), startUsage)
	deleted, err := hubRequests(ctx, floorEnv.Hub.Config())
	if err != nil {
		return err
	}
	res.DeleteFloorRequests = deleted.sub(end)
	sc.Log("delete floor: %s", res.DeleteFloor.Round(time.Millisecond))
	return nil
}

// measure runs the scenario on a started fleet.
func measure(ctx context.Context, sc Scenario, f *localfleet.System, clusters []string, res *Result, prof *profiler) error {
	hubCfg := f.Env.Hub.Config()
	simFleet, err := startSimulator(ctx, sc, f, clusters)
	if err != nil {
		return err
	}
	defer simFleet.stop()
	prof.add("simulator", &http.Client{}, simFleet.base+"/debug/pprof/")
	defer sc.Cgroups.place(fleetPids(f, simFleet))()
	t, err := startTracker(ctx, hubCfg)
	if err != nil {
		return err
	}
	defer t.close()
	procs := processes(f, simFleet)
	controller := &restartableUsage{pid: f.ControllerPid}
	procs["controller"] = controller.read
	startUsage := usageOf(procs)
	startRequests, err := hubRequests(ctx, hubCfg)
	if err != nil {
		return err
	}
	// The requests and the processes' usage so far, also when the run stops early (an error, Ctrl-C).
	record := func() {
		if res.Requests != nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if end, err := hubRequests(rctx, hubCfg); err == nil {
			res.Requests = end.sub(startRequests)
		}
		for name, u := range usageOf(procs) {
			u.CPUSeconds -= startUsage[name].CPUSeconds
			res.Usage[name] = u
		}
	}
	defer record()

	c, err := clientFor(hubCfg, sc.QPS, sc.Burst)
	if err != nil {
		return err
	}
	sets, err := createAppSets(ctx, c, localfleet.ArgoCDNamespace, sc.AppSets)
	if err != nil {
		return err
	}
	start := time.Now()
	stopSampling := sampleTimeline(start, simFleet, t, procs, f.ControllerMetrics, res)
	stopProfiling := prof.cpu(ctx, "sync")
	total := res.Applications
	sc.Log("creating %d Applications for %d ApplicationSets over %d clusters", total, sc.AppSets, sc.Clusters)
	var retries, created atomic.Int64
	killAt := int64(math.Ceil(sc.KillControllerAt * float64(total)))
	reached := make(chan struct{})
	killed := make(chan error, 1)
	var killedInCreate *killResult // read once killed has sent
	// keepKill puts the killed controller's figures, and its successor's peak RSS so far, in the results.
	keepKill := func() {
		res.KilledInCreate = killedInCreate
		res.KilledInCreate.PeakRSS = peakRSS(f.ControllerPid())
	}
	if killAt > 0 {
		go func() {
			var err error
			killedInCreate, err = killInCreate(ctx, sc, f, hubCfg, controller, reached, func() int { return int(created.Load()) },
				start, startUsage["controller"].CPUSeconds)
			killed <- err
		}()
	}
	err = forEach(ctx, total, sc.creators(), func(ctx context.Context, i int) error {
		app := pullApplication(sets[i%sc.AppSets], clusters[i/sc.AppSets])
		err := retried(ctx, &retries, func() error { return c.Create(ctx, app) }, apierrors.IsAlreadyExists)
		if err == nil && created.Add(1) == killAt {
			close(reached)
		}
		return err
	})
	if n := retries.Load(); n > 0 {
		res.Retries += n
		sc.Log("%d creates sent again after a transient apiserver error", n)
	}
	if err != nil {
		stopSampling()
		stopProfiling()
		// A run stopped in the creates keeps the killed controller's figures if it had caught up by then.
		select {
		case killErr := <-killed:
			if killErr == nil {
				keepKill()
			}
		default:
		}
		return fmt.Errorf("create applications: %w", err)
	}
	res.CreateTime = time.Since(start)
	sc.Log("created in %s; waiting for delivery and Synced/Healthy", res.CreateTime.Round(time.Millisecond))
	err = waitFor(ctx, 6*time.Hour, func() (bool, string) {
		st, err := simFleet.stats(ctx)
		if err != nil {
			return false, fmt.Sprintf("simulator: %v", err)
		}
		_, synced := t.counts()
		if res.Delivered == 0 && st.Works >= int64(total) {
			res.Delivered = time.Since(start)
		}
		return synced >= total, fmt.Sprintf("delivered %d/%d, Synced/Healthy on the hub %d/%d", st.Works, total, synced, total)
	}, sc.Log)
	stopSampling()
	synced := time.Since(start)
	if killAt > 0 {
		// The new controller has caught up with the Applications created before it, or is about to; a run
		// stopped before every Application was Synced keeps the figures if it had them.
		var killErr error
		select {
		case killErr = <-killed:
		default:
			killErr = errors.New("the controller killed in the creates had not caught up")
			if err == nil {
				killErr = <-killed
			}
		}
		if killErr == nil {
			keepKill()
		} else if err == nil {
			err = killErr
		}
	}
	if err != nil {
		stopProfiling()
		return err
	}
	res.Synced = synced
	syncedUsage := usageOf(procs)
	res.SyncedCPU = hubSideCPU(syncedUsage, startUsage)
	res.SyncedProcessCPU = processCPU(syncedUsage, startUsage)
	if end, err := hubRequests(ctx, hubCfg); err == nil {
		res.SyncedRequests = end.sub(startRequests)
	}
	stopProfiling()
	if res.AppBytes, err = meanApplicationBytes(ctx, hubCfg); err != nil {
		return err
	}
	prof.heap(ctx, "synced")
	sc.Log("every Application Synced and Healthy on the hub after %s (floor %s, ratio %.2f)", res.Synced.Round(time.Second), res.Floor.Round(time.Second), res.Ratio())
	if sc.Transport == workclient.TransportGRPC {
		if res.PostgresBytes, err = postgresSize(ctx, f); err != nil {
			return err
		}
	}

	if err := measureRest(ctx, sc, simFleet, hubCfg, res); err != nil {
		return err
	}
	prof.heap(ctx, "rest")
	if sc.Console {
		if err := measureConsole(ctx, sc, f, clusters, res); err != nil {
			return err
		}
	}
	if sc.Latency > 0 {
		if err := measureLatency(ctx, sc, simFleet, t, hubCfg, res); err != nil {
			return err
		}
	}
	record()
	if sc.Restart {
		components := []string{localfleet.ComponentController}
		if sc.Transport == workclient.TransportGRPC {
			components = append(components, localfleet.ComponentServer)
		}
		for _, c := range components {
			if err := measureRestart(ctx, sc, f, simFleet, hubCfg, c, res, prof); err != nil {
				return err
			}
		}
	}
	defer prof.cpu(ctx, "delete")()
	return measureDelete(ctx, sc, f, c, sets, simFleet, t, res)
}

// slowChange is one slow status change: At is when it was made, from the start of the latency phase.
type slowChange struct {
	At, Total, Hub time.Duration
}

// measureRest counts status events and hub writes while nothing changes on the clusters. The hub apiserver
// renews its own identity lease every ten seconds; those writes are counted apart.
func measureRest(ctx context.Context, sc Scenario, s *simulator, hub *rest.Config, res *Result) error {
	settled, err := settle(ctx, sc, hub, "every Application was Synced/Healthy")
	if err != nil {
		return err
	}
	res.Settled = res.Synced + settled
	sc.Log("at rest for %s", sc.RestPeriod)
	before, startStats, err := fleetCounts(ctx, hub, s)
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(sc.RestPeriod):
	}
	after, endStats, err := fleetCounts(ctx, hub, s)
	if err != nil {
		return err
	}
	minutes := sc.RestPeriod.Minutes()
	res.RestStatusEvents = (endStats.StatusUpdates - startStats.StatusUpdates) / minutes
	delta := after.sub(before)
	res.RestHubWritesByResource, res.RestRefusedWrites = delta.writesByResource(minutes), delta.refusedByResource(minutes)
	for resource, n := range res.RestHubWritesByResource {
		if resource != "leases" {
			res.RestHubWrites += n
		}
	}
	if res.RestHubWritesByResource["events"] > 0 {
		if res.RestEventWriters, err = eventWriters(ctx, hub, start, time.Now()); err != nil {
			return err
		}
	}
	sc.Log("at rest: %.1f status events/min, %.1f hub writes/min %v (refused %v), Events by writer %v", res.RestStatusEvents,
		res.RestHubWrites, res.RestHubWritesByResource, res.RestRefusedWrites, res.RestEventWriters)
	return nil
}

// fleetCounts reads the hub apiserver's request counters and the simulator's counts.
func fleetCounts(ctx context.Context, hub *rest.Config, s *simulator) (requestCounts, simStats, error) {
	requests, err := hubRequests(ctx, hub)
	if err != nil {
		return nil, simStats{}, err
	}
	st, err := s.stats(ctx)
	return requests, st, err
}

// maxSettle bounds how long the fleet may go on writing to the hub once every Application is Synced/Healthy.
const maxSettle = 15 * time.Minute

// settle waits, once every Application is Synced and Healthy, until the hub takes no more writes (lease renewals
// aside) for sc.Settle: the writes that trail the rollout, the reports' last ones above all, whose write budget
// spreads them out. It returns how long that took.
func settle(ctx context.Context, sc Scenario, hub *rest.Config, after string) (time.Duration, error) {
	start := time.Now()
	last, err := hubRequests(ctx, hub)
	if err != nil {
		return 0, err
	}
	quietSince := start
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := hubRequests(ctx, hub)
		if err != nil {
			return 0, err
		}
		for resource := range now.sub(last).writesByResource(1) {
			if resource != "leases" {
				quietSince = time.Now()
				break
			}
		}
		last = now
		switch {
		case time.Since(quietSince) >= sc.Settle:
			settled := quietSince.Sub(start)
			sc.Log("the hub's writes stopped %s after %s", settled.Round(time.Second), after)
			return settled, nil
		case time.Since(start) > maxSettle:
			return 0, fmt.Errorf("the hub still takes writes %s after %s", maxSettle, after)
		}
	}
}

// measureLatency turns churn on and measures, for each status change the simulated clusters send, the time
// until the hub Application shows it; and, to tell a slow tail's cause, the hub's part of each change's way
// (from the agent's send), the slowest changes with the second they were made, and the watches the hub
// apiserver closed and the lists it served meanwhile.
func measureLatency(ctx context.Context, sc Scenario, s *simulator, t *tracker, hubCfg *rest.Config, res *Result) error {
	sc.Log("status latency with churn at %.0f changes/s for %s", sc.LatencyRate, sc.Latency)
	startRequests, err := hubRequests(ctx, hubCfg)
	if err != nil {
		return err
	}
	stopEvents, err := s.events(ctx, func(e sim.Event) {
		if e.ChangedAt.IsZero() || e.Sync == "" {
			return
		}
		t.expect(e.HubNamespace+"/"+e.HubName, e.Sync, e.Health, e.ChangedAt, e.At)
	})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := s.setChurn(ctx, sc.LatencyRate); err != nil {
		stopEvents()
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(sc.Latency):
	}
	if err := s.setChurn(ctx, 0); err != nil {
		stopEvents()
		return err
	}
	time.Sleep(5 * time.Second) // let the last changes arrive
	stopEvents()
	if end, err := hubRequests(ctx, hubCfg); err == nil {
		res.LatencyRequests = end.sub(startRequests)
	}
	samples, missing := t.latencies()
	summarizeLatency(samples, start, res)
	res.LatencyMissing = missing
	sc.Log("status latency: p50 %s, p99 %s (the hub's part p99 %s), max %s over %d changes, %d over a second (%d not seen on the hub)",
		res.LatencyP50, res.LatencyP99, res.LatencyHubP99, res.LatencyMax, res.LatencySamples, res.LatencyOverSecond, missing)
	for _, slow := range res.LatencySlowest {
		sc.Log("  slow: changed at +%s, %s to the hub (%s after it was sent)", slow.At, slow.Total, slow.Hub)
	}
	sc.Log("  meanwhile the hub apiserver closed %.0f watches of ManifestWorks and %.0f of Applications as too slow, and served %.0f LISTs of ManifestWorks",
		res.LatencyRequests[closedWorkWatches], res.LatencyRequests[closedWatches], res.LatencyRequests["LIST manifestworks"])
	return nil
}

// slowestKept is how many of the slowest status changes a result lists.
const slowestKept = 10

// summarizeLatency sets res's latency figures from the samples (sorted, slowest last) of a phase that started
// at start.
func summarizeLatency(samples []latencySample, start time.Time, res *Result) {
	total := make([]time.Duration, len(samples))
	hub := make([]time.Duration, len(samples))
	res.LatencyOverSecond = 0
	for i, s := range samples {
		total[i], hub[i] = s.Total, s.Hub
		if s.Total > time.Second {
			res.LatencyOverSecond++
		}
	}
	sort.Slice(hub, func(i, j int) bool { return hub[i] < hub[j] })
	res.LatencySamples = len(samples)
	res.LatencyP50, res.LatencyP99 = percentile(total, 50), percentile(total, 99)
	res.LatencyHubP99 = percentile(hub, 99)
	res.LatencyMax = percentile(total, 100)
	res.LatencySlowest = nil
	for i := len(samples) - 1; i >= 0 && len(samples)-i <= slowestKept; i-- {
		s := samples[i]
		res.LatencySlowest = append(res.LatencySlowest, slowChange{At: s.ChangedAt.Sub(start).Round(time.Millisecond),
			Total: s.Total.Round(time.Millisecond), Hub: s.Hub.Round(time.Millisecond)})
	}
}

// measureDelete deletes the ApplicationSets and measures the time to no work, no Application on the clusters
// and no Application on the hub; works left after that are orphans.
func measureDelete(ctx context.Context, sc Scenario, f *localfleet.System, c client.Client, sets []*unstructured.Unstructured, s *simulator, t *tracker, res *Result) error {
	sc.Log("deleting the %d ApplicationSets", len(sets))
	hubCfg := f.Env.Hub.Config()
	startRequests, err := hubRequests(ctx, hubCfg)
	if err != nil {
		return err
	}
	procs := processes(f, s)
	startUsage := usageOf(procs)
	start := time.Now()
	for _, set := range sets {
		if err := c.Delete(ctx, set); err != nil {
			return fmt.Errorf("delete applicationset %s: %w", set.GetName(), err)
		}
	}
	err = waitFor(ctx, 2*time.Hour, func() (bool, string) {
		works, err := countWorks(ctx, f)
		if err != nil {
			return false, err.Error()
		}
		apps, _ := t.counts()
		res.DeleteGone = res.Applications - apps
		st, err := s.stats(ctx)
		if err != nil {
			return false, fmt.Sprintf("simulator: %v", err)
		}
		spoke := st.Applications
		if works == 0 && res.DeleteWorks == 0 {
			res.DeleteWorks = time.Since(start)
		}
		if spoke == 0 && apps == 0 && res.DeleteApps == 0 {
			res.DeleteApps = time.Since(start)
		}
		return works == 0 && spoke == 0 && apps == 0, fmt.Sprintf("works %d, Applications on clusters %d, on the hub %d", works, spoke, apps)
	}, sc.Log)
	res.DeleteProcessCPU = processCPU(usageOf(procs), startUsage)
	// A run stopped in the delete (a SIGINT) still reads the hub's counters: what was deleted until then is
	// measured per Application gone.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if end, rerr := hubRequests(rctx, hubCfg); rerr == nil {
		res.DeleteRequests = end.sub(startRequests)
	}
	if err != nil {
		if ctx.Err() != nil {
			res.DeleteStopped = time.Since(start)
			sc.Log("stopped in the delete after %s: %d of %d Applications gone from the hub", res.DeleteStopped.Round(time.Second), res.DeleteGone, res.Applications)
			return err
		}
		works, _ := countWorks(rctx, f)
		res.Orphans = works
		return err
	}
	sc.Log("deleted: no work after %s, no Application anywhere after %s", res.DeleteWorks.Round(time.Second), res.DeleteApps.Round(time.Second))
	return nil
}

// countWorks counts the works left: rows on the server, or ManifestWorks on the hub.
func countWorks(ctx context.Context, f *localfleet.System) (int, error) {
	if f.Transport == workclient.TransportKube {
		c, err := f.HubClient()
		if err != nil {
			return 0, err
		}
		list := &workv1.ManifestWorkList{}
		if err := c.List(ctx, list, client.Limit(1)); err != nil {
			return 0, err
		}
		n := len(list.Items)
		if list.RemainingItemCount != nil {
			n += int(*list.RemainingItemCount)
		}
		return n, nil
	}
	return f.ServerClient().CountResourceBundles(ctx)
}

func postgresSize(ctx context.Context, f *localfleet.System) (int64, error) {
	var size int64
	err := withPostgres(ctx, f.Env.Postgres.URL("argocd_pull"), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_database_size('argocd_pull')").Scan(&size)
	})
	return size, err
}

// simulatorProcess and benchmarkProcess stand in for the managed clusters and for the users of the hub: the
// simulated fleet, and the benchmark itself (the clients that create the Applications, the tracker that
// watches them). Neither is the hub's.
const (
	simulatorProcess = "simulator"
	benchmarkProcess = "benchmark (tracker)"
)

// processes are the measured processes, by name.
func processes(f *localfleet.System, s *simulator) map[string]func() (usage, error) {
	ps := map[string]func() (usage, error){
		"controller":              pidUsage(f.ControllerPid()),
		"kube-apiserver":          pidUsage(f.Env.Hub.Pid()),
		"etcd":                    pidUsage(f.Env.EtcdPid()),
		"kube-controller-manager": pidUsage(f.Env.Hub.ControllerManagerPid()),
		simulatorProcess:          pidUsage(s.pid()),
		benchmarkProcess:          ownUsage,
	}
	if f.Transport == workclient.TransportGRPC {
		ps["server"] = pidUsage(f.ServerPid())
		ps["postgres"] = pssTree(f.Env.Postgres.Pid(), postgresPSSInterval)
	}
	return ps
}

// fleetPids are the measured processes' IDs, by name, as cgroups.place wants them.
func fleetPids(f *localfleet.System, s *simulator) map[string]func() []int {
	ps := map[string]func() []int{
		"controller":              pidsOf(f.ControllerPid),
		"kube-apiserver":          pidsOf(f.Env.Hub.Pid),
		"etcd":                    pidsOf(f.Env.EtcdPid),
		"kube-controller-manager": pidsOf(f.Env.Hub.ControllerManagerPid),
		simulatorProcess:          pidsOf(s.pid),
		benchmarkProcess:          pidsOf(os.Getpid),
	}
	if f.Transport == workclient.TransportGRPC {
		ps["server"] = pidsOf(f.ServerPid)
		ps["postgres"] = treePids(f.Env.Postgres.Pid)
	}
	return ps
}

// hubSideCPU is the CPU seconds the hub-side processes spent between two readings; the simulator and the
// benchmark are not the hub's.
func hubSideCPU(now, start map[string]usage) float64 {
	return hubSide(processCPU(now, start))
}

// hubSide sums the CPU seconds of the hub-side processes, the simulator and the benchmark left out.
func hubSide(cpu map[string]float64) float64 {
	var total float64
	for name, v := range cpu {
		if name != simulatorProcess && name != benchmarkProcess {
			total += v
		}
	}
	return total
}

// processCPU is the CPU seconds each process spent between two readings.
func processCPU(now, start map[string]usage) map[string]float64 {
	out := map[string]float64{}
	for name, u := range now {
		out[name] = u.CPUSeconds - start[name].CPUSeconds
	}
	return out
}

// peakRSS is a process's peak resident set size so far (0 if it cannot be read).
func peakRSS(pid int) int64 {
	u, err := processUsage(pid)
	if err != nil {
		return 0
	}
	return u.PeakRSSBytes
}

func pidUsage(pid int) func() (usage, error) {
	return func() (usage, error) { return processUsage(pid) }
}

func usageOf(procs map[string]func() (usage, error)) map[string]usage {
	out := map[string]usage{}
	for name, f := range procs {
		if u, err := f(); err == nil {
			out[name] = u
		}
	}
	return out
}

// sampleTimeline records the timeline every two seconds until the returned function is called.
func sampleTimeline(start time.Time, s *simulator, t *tracker, procs map[string]func() (usage, error), controllerMetrics string, res *Result) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	rss := func(name string) int64 {
		if f, ok := procs[name]; ok {
			if u, err := f(); err == nil {
				return u.RSSBytes
			}
		}
		return 0
	}
	go func() {
		defer close(finished)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			_, synced := t.counts()
			st, _ := s.stats(context.Background())
			queue, err := queueDepth(context.Background(), controllerMetrics, "application")
			if err != nil {
				queue = -1
			}
			res.Timeline = append(res.Timeline, sample{At: time.Since(start), Delivered: st.Works, Synced: int64(synced),
				ControllerRSS: rss("controller"), ServerRSS: rss("server"), APIServerRSS: rss("kube-apiserver"),
				SimulatorRSS: rss(simulatorProcess), PostgresPSS: rss("postgres"), ControllerQueue: queue})
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// waitFor polls cond every two seconds, logging its progress every 30 seconds.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string), log func(string, ...any)) error {
	return waitForEvery(ctx, timeout, 2*time.Second, cond, log)
}

// waitForEvery polls cond every interval, logging its progress every 30 seconds.
func waitForEvery(ctx context.Context, timeout, interval time.Duration, cond func() (bool, string), log func(string, ...any)) error {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		ok, progress := cond()
		if ok {
			return nil
		}
		if time.Since(lastLog) > 30*time.Second {
			log("  %s", progress)
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out: %s", progress)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(interval):
		}
	}
}
