package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Case is one fault of the matrix: the components it takes down, one second apart, how, and the order they
// come back in, Timing.Gap apart. A component is a localfleet component: a process or a network link.
type Case struct {
	Name     string
	Down, Up []string
	Fault    Fault
}

// Fault is how a case takes its components down.
type Fault string

// Faults.
const (
	// Kill kills processes with SIGKILL and cuts network links (connections reset, new ones refused).
	Kill Fault = ""
	// Stop stops processes gracefully (SIGTERM; PostgreSQL's fast shutdown).
	Stop Fault = "stop"
	// Partition drops a link's traffic silently: its connections are lost for good, nobody is told.
	Partition Fault = "partition"
)

// Phases of a case.
const (
	PhaseRollout = "rollout"
	PhaseDelete  = "mass delete"
)

// Result is what one phase of a case measured.
type Result struct {
	Case, Phase  string
	Applications int
	// Lost: rollout, hub Applications without their copy on the cluster; mass delete, hub Applications still
	// there (a deletion that never completed). Orphans: Applications on clusters without their hub
	// Application, and works on the server without their hub Application. Stale: hub Applications whose
	// status is not their cluster's.
	Lost, Orphans, Stale int
	// Downtime is from the first component down to the last one back.
	Downtime time.Duration
	// Converged is from the last component back (without a fault: from the start of the phase) until the
	// fleet converged; -1 when it did not.
	Converged time.Duration
	// Backlog is what an undisturbed fleet (the baseline's pace) needs for the work still pending when the last
	// component was back; -1 when unknown.
	Backlog time.Duration
	// Failure says what went wrong, with examples; empty when the phase passed.
	Failure string
}

// Recovery is the time to converge beyond the backlog.
func (r *Result) Recovery() time.Duration {
	if r.Backlog < 0 || r.Converged < 0 {
		return r.Converged
	}
	return max(r.Converged-r.Backlog, 0)
}

// Timing paces a run.
type Timing struct {
	// Downtime is how long the components stay down after the last one went down.
	Downtime time.Duration
	// Gap is the time between two components coming back.
	Gap time.Duration
	// Settle is how long a converged fleet runs before the final count.
	Settle time.Duration
	// Timeout bounds each phase's convergence.
	Timeout time.Duration
	// RecoveryBound fails a phase whose recovery took longer.
	RecoveryBound time.Duration
}

// bound is how long a case's recovery may take. Nobody is told of a partition: a client notices its dead
// connections by keepalive, within workclient.KeepAliveTime + KeepAliveTimeout of the last traffic, and the
// recovery after a short partition starts then.
func (t Timing) bound(c Case) time.Duration {
	if c.Fault == Partition {
		return t.RecoveryBound + workclient.KeepAliveTime + workclient.KeepAliveTimeout
	}
	return t.RecoveryBound
}

// runner runs cases on one fleet.
type runner struct {
	f      *fleet
	obs    *observer
	timing Timing
	logf   func(string, ...any)
	// pace is the baseline's Applications per second, by phase.
	pace map[string]float64
}

// run runs a case's rollout and mass delete, each with the case's fault in the middle.
func (r *runner) run(ctx context.Context, index int, c Case) []*Result {
	prefix := fmt.Sprintf("c%02d-", index)
	ro := r.f.newRollout(prefix)
	r.logf("case %q: %d Applications (prefix %s)", c.Name, len(ro.apps), prefix)
	rollout := r.phase(ctx, c, ro, PhaseRollout)
	if rollout.Failure != "" && strings.HasPrefix(rollout.Failure, "could not") {
		return []*Result{rollout}
	}
	return []*Result{rollout, r.phase(ctx, c, ro, PhaseDelete)}
}

// phase runs one phase: it starts the rollout or the deletion, injects the fault once a third of the
// Applications are Synced and Healthy on the hub (or gone from it), waits until the fleet converges, lets it
// settle and counts what is lost, orphaned or stale.
func (r *runner) phase(ctx context.Context, c Case, ro *rollout, phase string) *Result {
	res := &Result{Case: c.Name, Phase: phase, Applications: len(ro.apps), Converged: -1, Backlog: -1}
	fail := func(format string, args ...any) *Result {
		res.Failure = fmt.Sprintf(format, args...)
		r.logf("  %s: %s", phase, res.Failure)
		return res
	}
	back := time.Now()
	var work errgroup.Group
	var err error
	if phase == PhaseRollout {
		err = r.startRollout(ctx, ro, &work)
	} else {
		err = r.f.deleteSets(ctx, ro)
	}
	if err != nil {
		return fail("could not start the %s: %v", phase, err)
	}
	if len(c.Down) > 0 {
		if back, err = r.fault(ctx, c, ro, phase, res); err != nil {
			return fail("%v", err)
		}
	}
	if err := work.Wait(); err != nil {
		return fail("could not create the Applications: %v", err)
	}
	var last *snapshot
	overdue := len(c.Down) > 0 // a fault's phase says once what it still waits for, when that is late
	if waitUntil(ctx, r.timing.Timeout, func() bool {
		last = r.obs.take(ctx, ro.prefix)
		done := r.converged(last, ro, phase)
		if !done && overdue && last.at.Sub(back) > res.Backlog+r.timing.bound(c) {
			overdue = false
			r.logf("  %s: not converged %s after the last component was back: %s", phase, seconds(last.at.Sub(back)), r.describe(last, ro, phase))
		}
		return done
	}) == nil {
		res.Converged = last.at.Sub(back)
	}
	for _, component := range c.Up {
		if err := r.f.WaitReady(ctx, component); err != nil {
			return fail("%s is not ready: %v", component, err)
		}
	}
	if res.Converged >= 0 {
		time.Sleep(r.timing.Settle)
	}
	r.count(ctx, ro, phase, res)
	r.judge(ctx, c, ro, phase, res, last)
	r.logf("  %s: converged %s after the last component was back (backlog %s, down for %s); lost %d, orphans %d, stale %d %s",
		phase, seconds(res.Converged), seconds(res.Backlog), seconds(res.Downtime), res.Lost, res.Orphans, res.Stale, res.Failure)
	if len(c.Down) == 0 && res.Converged > 0 {
		r.pace[phase] = float64(len(ro.apps)) / res.Converged.Seconds()
	}
	return res
}

// fault injects the case's fault once a third of the phase is done and returns when the last component was
// back; it records the downtime and the backlog then.
func (r *runner) fault(ctx context.Context, c Case, ro *rollout, phase string, res *Result) (time.Time, error) {
	third := len(ro.apps) / 3
	if err := waitUntil(ctx, r.timing.Timeout, func() bool { return r.progress(ro, phase) >= third }); err != nil {
		return time.Time{}, fmt.Errorf("could not start the fault: a third of the %s did not happen: %w", phase, err)
	}
	down := time.Now()
	if err := r.inject(ctx, c); err != nil {
		return time.Time{}, fmt.Errorf("could not inject the fault: %w", err)
	}
	back := time.Now()
	res.Downtime = back.Sub(down)
	if pace := r.pace[phase]; pace > 0 {
		pending := r.pending(r.obs.take(ctx, ro.prefix), ro, phase)
		res.Backlog = time.Duration(float64(pending) / pace * float64(time.Second))
	}
	return back, nil
}

// judge sets the phase's failure, if any: not converged, something lost, orphaned or stale, or a recovery
// over the case's bound.
func (r *runner) judge(ctx context.Context, c Case, ro *rollout, phase string, res *Result, last *snapshot) {
	switch {
	case res.Failure != "":
	case res.Converged < 0:
		res.Failure = fmt.Sprintf("not converged after %s: %s", r.timing.Timeout, r.describe(last, ro, phase))
	case res.Lost+res.Orphans+res.Stale > 0:
		res.Failure = "after settling: " + r.describe(r.obs.take(ctx, ro.prefix), ro, phase)
	case len(c.Down) > 0 && res.Recovery() > r.timing.bound(c):
		res.Failure = fmt.Sprintf("recovery took %s, more than %s", res.Recovery().Round(100*time.Millisecond), r.timing.bound(c))
	}
}

// startRollout creates the ApplicationSets, then their Applications in the background, 16 at a time.
func (r *runner) startRollout(ctx context.Context, ro *rollout, work *errgroup.Group) error {
	if err := r.f.createSets(ctx, ro); err != nil {
		return err
	}
	work.Go(func() error {
		var g errgroup.Group
		g.SetLimit(16)
		for _, app := range ro.apps {
			g.Go(func() error {
				if err := r.f.hub.Create(ctx, app.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("create application %s: %w", app.GetName(), err)
				}
				return nil
			})
		}
		return g.Wait()
	})
	return nil
}

// progress is how much of a phase is done: hub Applications Synced and Healthy, or gone.
func (r *runner) progress(ro *rollout, phase string) int {
	r.obs.mu.Lock()
	defer r.obs.mu.Unlock()
	n := 0
	for _, app := range ro.apps {
		h, ok := r.obs.hub[app.GetName()]
		if (phase == PhaseRollout && ok && h.settled()) || (phase == PhaseDelete && !ok) {
			n++
		}
	}
	return n
}

// inject takes the case's components down, waits, and brings them back in the case's order.
func (r *runner) inject(ctx context.Context, c Case) error {
	for i, component := range c.Down {
		if i > 0 {
			time.Sleep(time.Second)
		}
		fault := map[Fault]func(string) error{Kill: r.f.Kill, Stop: r.f.Shutdown, Partition: r.f.Partition}[c.Fault]
		if err := fault(component); err != nil {
			return err
		}
	}
	time.Sleep(r.timing.Downtime)
	for i, component := range c.Up {
		if i > 0 {
			time.Sleep(r.timing.Gap)
		}
		if err := r.f.Restart(ctx, component); err != nil {
			return err
		}
	}
	return nil
}

// converged reports whether a phase is done everywhere. Rollout: every Application on the hub and on its
// cluster, Synced and Healthy there, with the same status on the hub, and a work for each on the server.
// Mass delete: no Application of the case on the hub or on a cluster, and no work on the server.
func (r *runner) converged(s *snapshot, ro *rollout, phase string) bool {
	if s.err != nil {
		return false
	}
	if phase == PhaseDelete {
		return len(s.hub) == 0 && len(s.spoke) == 0 && s.works == 0
	}
	if len(s.hub) != len(ro.apps) || len(s.spoke) != len(ro.apps) || s.works != len(ro.apps) {
		return false
	}
	return r.pending(s, ro, phase) == 0
}

// pending is how many Applications a phase has yet to finish.
func (r *runner) pending(s *snapshot, ro *rollout, phase string) int {
	if phase == PhaseDelete {
		return max(len(s.hub), len(s.spoke), s.works)
	}
	n := 0
	for _, app := range ro.apps {
		h, okHub := s.hub[app.GetName()]
		sp, okSpoke := s.spoke[app.GetName()]
		if !okHub || !okSpoke || h.deleting || !sp.settled() || h.status != sp {
			n++
		}
	}
	return n
}

// count fills in what was lost, orphaned and stale.
func (r *runner) count(ctx context.Context, ro *rollout, phase string, res *Result) {
	s := r.obs.take(ctx, ro.prefix)
	if s.err != nil {
		res.Failure = fmt.Sprintf("could not read the fleet's state at the end: %v", s.err)
	}
	for name, h := range s.hub {
		sp, onCluster := s.spoke[name]
		switch {
		case phase == PhaseDelete:
			res.Lost++
		case !onCluster && !h.deleting:
			res.Lost++
		case onCluster && h.status != sp:
			res.Stale++
		}
	}
	for name := range s.spoke {
		if _, ok := s.hub[name]; !ok {
			res.Orphans++
		}
	}
	works, err := r.obs.worksWithoutApplication(ctx, ro.prefix)
	if err != nil && res.Failure == "" {
		res.Failure = fmt.Sprintf("could not list the works at the end: %v", err)
	}
	res.Orphans += len(works)
}

// describe says what a snapshot lacks, with a few examples.
func (r *runner) describe(s *snapshot, ro *rollout, phase string) string {
	if s == nil {
		return "no snapshot"
	}
	var parts []string
	if s.err != nil {
		parts = append(parts, s.err.Error())
	}
	parts = append(parts, fmt.Sprintf("%d on the hub, %d on the clusters, %d works on the server", len(s.hub), len(s.spoke), s.works))
	var examples []string
	for _, app := range ro.apps {
		name := app.GetName()
		h, okHub := s.hub[name]
		sp, okSpoke := s.spoke[name]
		switch {
		case len(examples) >= 3:
		case phase == PhaseDelete && (okHub || okSpoke):
			examples = append(examples, fmt.Sprintf("%s (hub %v, cluster %v)", name, okHub, okSpoke))
		case phase == PhaseRollout && (!okHub || !okSpoke || h.status != sp || !sp.settled()):
			examples = append(examples, fmt.Sprintf("%s (hub %v %s, cluster %v %s)", name, okHub, h.status, okSpoke, sp))
		}
	}
	if len(examples) > 0 {
		parts = append(parts, "e.g. "+strings.Join(examples, ", "))
	}
	return strings.Join(parts, "; ")
}

// waitUntil polls cond every half second until it holds, ctx ends or the timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

// clean waits until the fleet holds nothing of earlier cases: no pull-model Application on the hub or on a
// cluster, no work on the server.
func (r *runner) clean(ctx context.Context) error {
	var last *snapshot
	err := waitUntil(ctx, r.timing.Timeout, func() bool {
		last = r.obs.take(ctx, "")
		return last.err == nil && len(last.hub) == 0 && len(last.spoke) == 0 && last.works == 0
	})
	if err != nil {
		return errors.Join(err, fmt.Errorf("%d Applications on the hub, %d on the clusters, %d works: %v",
			len(last.hub), len(last.spoke), last.works, last.err))
	}
	return nil
}

func seconds(d time.Duration) string {
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
