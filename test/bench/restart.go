package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
)

// restartResult is what a restart of a hub process cost once the fleet was at rest: the process killed
// (SIGKILL, as a crash or an evicted Pod) and started again at once, as its Deployment would. A restarted
// process learns the fleet again (the controller lists every Application and work, the server takes every
// agent's and the controller's subscription and answers their resyncs); it should write nothing to the hub, and
// deliver nothing to the clusters, that is already there.
type restartResult struct {
	// Process is the process restarted: the controller or the server.
	Process string
	// Ready is from the start of the new process until it said it was ready (/readyz); CaughtUp until it had
	// caught up (the controller: every Application reconciled and its queue empty; the server: every agent and
	// the controller subscribed again and their resyncs answered); Settled until the hub took no more writes
	// after that (lease renewals aside).
	Ready, CaughtUp, Settled time.Duration
	// HubWrites are the hub apiserver's writes, by resource, from the kill until the hub took none for the
	// scenario's Settle; the leases included (the apiserver's own renewals, and the leader election lease a new
	// controller takes).
	HubWrites map[string]float64
	// RefusedWrites are those of HubWrites the apiserver answered with an error, by resource.
	RefusedWrites map[string]float64 `json:",omitempty"`
	// EventWriters counts the Events written meanwhile by the component that wrote them.
	EventWriters map[string]int `json:",omitempty"`
	// WorksApplied and StatusUpdates are the work generations the simulated clusters applied and the statuses
	// they sent in that time.
	WorksApplied, StatusUpdates float64
	// ProcessCPU is each process's CPU seconds in that time (the restarted one's since it started), and PeakRSS
	// the restarted process's peak RSS.
	ProcessCPU map[string]float64
	PeakRSS    int64
}

// applicationWrites is the restart's writes of Applications (the hub's copies of the managed clusters' status).
func (r restartResult) applicationWrites() float64 { return r.HubWrites["applications"] }

// restartTimeout bounds how long a restarted process may take to catch up.
const restartTimeout = time.Hour

// measureRestart restarts a hub process (localfleet.ComponentController or ComponentServer) once the hub takes
// no writes, and measures what it took to catch up and what it wrote. With -pprof the processes are profiled from
// the kill until the hub is quiet again (phase restart-<process>; the restarted process's profile starts once it
// serves it), and the restarted process's heap is taken as its RSS grows (heapAtPeak).
func measureRestart(ctx context.Context, sc Scenario, f *localfleet.System, s *simulator, hub *rest.Config, component string, res *Result, prof *profiler) error {
	name := map[string]string{localfleet.ComponentController: "controller", localfleet.ComponentServer: "server"}[component]
	if _, err := settle(ctx, sc, hub, "the previous phase"); err != nil {
		return err
	}
	procs := processes(f, s)
	startUsage := usageOf(procs)
	before, startStats, err := fleetCounts(ctx, hub, s)
	if err != nil {
		return err
	}
	sc.Log("restarting the %s (SIGKILL) at rest", name)
	stopProfiling := prof.cpu(ctx, "restart-"+name)
	defer stopProfiling()
	killed := time.Now()
	if err := f.Kill(component); err != nil {
		return err
	}
	start := time.Now()
	if err := f.Restart(ctx, component); err != nil {
		return err
	}
	if err := f.WaitReady(ctx, component); err != nil {
		return fmt.Errorf("restarted %s: %w", name, err)
	}
	r := restartResult{Process: name, Ready: time.Since(start)}
	pid := f.ControllerPid()
	if component == localfleet.ComponentServer {
		pid = f.ServerPid()
	}
	procs[name] = pidUsage(pid)
	delete(startUsage, name)
	stopPeakHeap := prof.heapAtPeak(ctx, "restart-"+name, name, procs[name], 5*time.Second)
	defer stopPeakHeap()

	caughtUp := func() (bool, string) { return controllerCaughtUp(ctx, f.ControllerMetrics, res.Applications) }
	if component == localfleet.ComponentServer {
		url, hc := f.ServerMetrics()
		caughtUp = func() (bool, string) { return serverCaughtUp(ctx, hc, url, sc.Clusters) }
	}
	if err := waitForEvery(ctx, restartTimeout, 250*time.Millisecond, caughtUp, sc.Log); err != nil {
		return fmt.Errorf("restarted %s not caught up: %w", name, err)
	}
	r.CaughtUp = time.Since(start)
	settled, err := settle(ctx, sc, hub, "the "+name+" caught up")
	if err != nil {
		return err
	}
	r.Settled = r.CaughtUp + settled
	after, endStats, err := fleetCounts(ctx, hub, s)
	if err != nil {
		return err
	}
	end := usageOf(procs)
	delta := after.sub(before)
	r.HubWrites, r.RefusedWrites = delta.writesByResource(1), delta.refusedByResource(1)
	if r.HubWrites["events"] > 0 {
		if r.EventWriters, err = eventWriters(ctx, hub, killed, time.Now()); err != nil {
			return err
		}
	}
	r.WorksApplied = endStats.WorksApplied - startStats.WorksApplied
	r.StatusUpdates = endStats.StatusUpdates - startStats.StatusUpdates
	r.ProcessCPU = processCPU(end, startUsage)
	r.PeakRSS = end[name].PeakRSSBytes
	res.Restarts = append(res.Restarts, r)
	sc.Log("restarted %s: ready after %s, caught up after %s, the hub quiet again after %s; hub writes %v (refused %v), Events by writer %v; %.0f works applied and %.0f statuses sent by the clusters; hub-side CPU %.1f s",
		name, r.Ready.Round(time.Millisecond), r.CaughtUp.Round(time.Millisecond), r.Settled.Round(time.Millisecond),
		r.HubWrites, r.RefusedWrites, r.EventWriters, r.WorksApplied, r.StatusUpdates, hubSide(r.ProcessCPU))
	return nil
}

// controllerCaughtUp reports whether a (re)started controller has reconciled every Application at least once and
// has none waiting: its informer lists them all at start and queues each.
func controllerCaughtUp(ctx context.Context, addr string, applications int) (bool, string) {
	reconciled, depth, err := controllerReconciles(ctx, addr)
	if err != nil {
		return false, err.Error()
	}
	return reconciled >= float64(applications) && depth == 0,
		fmt.Sprintf("controller: %.0f reconciles of %d Applications, %.0f queued", reconciled, applications, depth)
}

// controllerReconciles reads how many times the controller at addr has reconciled an Application since it
// started, and how many wait in its queue.
func controllerReconciles(ctx context.Context, addr string) (reconciled, depth float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = scrapeMetrics(ctx, http.DefaultClient, "http://"+addr+"/metrics", func(metric, labels string, v float64) {
		switch {
		case metric == "controller_runtime_reconcile_total" && label(labels, "controller") == "application":
			reconciled += v
		case metric == "workqueue_depth" && label(labels, "name") == "application":
			depth += v
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("controller metrics: %w", err)
	}
	return reconciled, depth, nil
}

// serverCaughtUp reports whether a (re)started server has every agent and a source (the controller) subscribed,
// and has answered a resync of each.
func serverCaughtUp(ctx context.Context, hc *http.Client, url string, clusters int) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var agents, sources, agentResyncs, sourceResyncs float64
	err := scrapeMetrics(ctx, hc, url, func(metric, labels string, v float64) {
		switch metric {
		case "argocd_pull_server_connected_agents":
			agents = v
		case "argocd_pull_server_connected_sources":
			sources = v
		case "argocd_pull_server_resyncs_total":
			if label(labels, "endpoint") == "agent" {
				agentResyncs += v
			} else {
				sourceResyncs += v
			}
		}
	})
	if err != nil {
		return false, fmt.Sprintf("server metrics: %v", err)
	}
	return agents >= float64(clusters) && sources >= 1 && agentResyncs >= float64(clusters) && sourceResyncs >= 1,
		fmt.Sprintf("server: %.0f/%d agents subscribed, %.0f resyncs answered; %.0f sources, %.0f resyncs", agents, clusters,
			agentResyncs, sources, sourceResyncs)
}

// killResult is what a controller killed while the Applications were created cost (Scenario.KillControllerAt):
// the new controller learns every Application there is by then (with the WatchList feature, a stream of the
// watch cache's events, not LIST pages) while the creates and the clusters' statuses go on at full speed.
type killResult struct {
	// Created is how many Applications had been created when the controller was killed, At when (from the
	// start of the creates).
	Created int
	At      time.Duration
	// From the start of the new process: Ready until it said it was ready (/readyz); Listed until the hub
	// apiserver had streamed it every Application (0: it streamed no list in that time, the informer paged a
	// LIST); Reconciling until it reconciled its first Application (its caches had synced); CaughtUp until it had
	// reconciled as many Applications as had been created when the old one was killed.
	Ready, Listed, Reconciling, CaughtUp time.Duration
	// Requests are the hub apiserver's requests from the kill until CaughtUp, with the watches it closed and the
	// lists it streamed (hubRequests).
	Requests requestCounts
	// KilledCPU is the killed controller's CPU seconds from the start of the creates; PeakRSS the new
	// controller's peak RSS until every Application was Synced/Healthy.
	KilledCPU float64
	PeakRSS   int64
}

// restartableUsage reads the usage of a process that is killed and started again: the CPU seconds of those
// killed before it (read as each was killed) are added to the running one's, and the peak RSS is the highest.
type restartableUsage struct {
	pid func() int
	mu  sync.Mutex
	// gone is what the killed processes used; killed their PIDs, which pid may give until it knows better.
	gone   usage
	killed map[int]bool
}

func (r *restartableUsage) read() (usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid := r.pid()
	if pid == 0 || r.killed[pid] {
		return usage{}, fmt.Errorf("process %d is not running", pid)
	}
	u, err := processUsage(pid)
	if err != nil {
		return u, err
	}
	u.CPUSeconds += r.gone.CPUSeconds
	u.PeakRSSBytes = max(u.PeakRSSBytes, r.gone.PeakRSSBytes)
	return u, nil
}

// kill reads the running process's usage a last time and kills it (kill returns once it has exited); it
// returns what the killed process used.
func (r *restartableUsage) kill(kill func() error) (usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid := r.pid()
	u, err := processUsage(pid)
	if err != nil {
		return u, err
	}
	if err := kill(); err != nil {
		return u, err
	}
	if r.killed == nil {
		r.killed = map[int]bool{}
	}
	r.killed[pid] = true
	r.gone.CPUSeconds += u.CPUSeconds
	r.gone.PeakRSSBytes = max(r.gone.PeakRSSBytes, u.PeakRSSBytes)
	return u, nil
}

// killInCreate SIGKILLs the controller once reached is closed (the scenario's share of the Applications is
// created), starts it again at once, as its Deployment would, and measures how long the new one took to be
// ready, to be streamed its list of Applications, and to catch up, while the creates go on. start is when the
// creates began, startCPU the controller's CPU seconds then.
func killInCreate(ctx context.Context, sc Scenario, f *localfleet.System, hub *rest.Config, controller *restartableUsage,
	reached <-chan struct{}, created func() int, start time.Time, startCPU float64) (*killResult, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-reached:
	}
	before, err := hubRequests(ctx, hub)
	if err != nil {
		return nil, err
	}
	r := &killResult{Created: created(), At: time.Since(start)}
	sc.Log("killing the controller (SIGKILL) with %d Applications created", r.Created)
	killed, err := controller.kill(func() error { return f.Kill(localfleet.ComponentController) })
	if err != nil {
		return nil, fmt.Errorf("kill the controller: %w", err)
	}
	r.KilledCPU = killed.CPUSeconds - startCPU
	restarted := time.Now()
	if err := f.Restart(ctx, localfleet.ComponentController); err != nil {
		return nil, err
	}
	if err := f.WaitReady(ctx, localfleet.ComponentController); err != nil {
		return nil, fmt.Errorf("restarted controller: %w", err)
	}
	r.Ready = time.Since(restarted)
	// The apiserver counts a streamed list when it has sent the list's last event; the informer has synced
	// once the controller reconciles.
	err = waitForEvery(ctx, restartTimeout, time.Second, func() (bool, string) {
		now, err := hubRequests(ctx, hub)
		if err != nil {
			return false, err.Error()
		}
		if r.Listed == 0 && now[streamedLists] > before[streamedLists] {
			r.Listed = time.Since(restarted)
		}
		reconciled, _, err := controllerReconciles(ctx, f.ControllerMetrics)
		if err != nil {
			return false, err.Error()
		}
		if r.Reconciling == 0 && reconciled > 0 {
			r.Reconciling = time.Since(restarted)
		}
		if reconciled < float64(r.Created) {
			return false, fmt.Sprintf("restarted controller: %.0f reconciles of the %d Applications created when it was killed; %.0f lists streamed, %.0f LIST pages",
				reconciled, r.Created, now[streamedLists]-before[streamedLists], now["LIST applications"]-before["LIST applications"])
		}
		r.CaughtUp = time.Since(restarted)
		r.Requests = now.sub(before)
		return true, ""
	}, sc.Log)
	if err != nil {
		return nil, fmt.Errorf("controller killed in the creates not caught up: %w", err)
	}
	sc.Log("controller killed with %d Applications created: ready after %s, its list streamed after %s, reconciling after %s, caught up after %s; %.0f watches of Applications closed, %.0f lists streamed, %.0f LIST pages",
		r.Created, r.Ready.Round(time.Millisecond), r.Listed.Round(time.Millisecond), r.Reconciling.Round(time.Millisecond),
		r.CaughtUp.Round(time.Millisecond), r.Requests[closedWatches], r.Requests[streamedLists], r.Requests["LIST applications"])
	return r, nil
}
