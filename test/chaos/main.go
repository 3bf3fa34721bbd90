// Command chaos is `make chaos`: the fault matrix of argocd-pull on real processes. It brings up a fleet on
// loopback — the hub's kube-apiserver, PostgreSQL, two argocd-pull server instances sharing it, the hub
// controller on the second, real managed clusters with the OCM work agent and a real Argo CD, and simulated
// clusters (argocd-pull sim, one process per server instance) for the scale — and for each case rolls out
// Applications and deletes them again, taking processes down (SIGKILL, or a graceful stop) or cutting a
// network link in the middle of each. It counts what was lost, orphaned or left stale and how long the fleet
// took to converge after the last component was back, prints the table and writes it into
// docs/reliability.md. A subset runs in every `go test ./...` (chaos_test.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

type options struct {
	doc, workDir string
	keep         bool
	cases        string
	scale        Scale
	timing       Timing
}

// fullScale is the matrix's fleet: 2,000 simulated Applications and a few on real clusters.
var fullScale = Scale{RealClusters: 2, RealSets: 5, SimClusters: 40, Sets: 50, SyncDelay: 2 * time.Second}

// fullTiming paces the matrix.
var fullTiming = Timing{Downtime: 5 * time.Second, Gap: 3 * time.Second, Settle: 10 * time.Second,
	Timeout: 10 * time.Minute, RecoveryBound: 10 * time.Second}

func main() {
	o := options{scale: fullScale, timing: fullTiming}
	flag.StringVar(&o.doc, "doc", "docs/reliability.md", "Markdown file whose generated section receives the table (empty: none)")
	flag.StringVar(&o.workDir, "work-dir", "", "Directory for the fleet's state and logs (a temporary one when empty)")
	flag.BoolVar(&o.keep, "keep", false, "Keep the work directory (it is kept anyway when a case fails)")
	flag.StringVar(&o.cases, "cases", "", "Regular expression of the cases to run besides the baseline (default: all)")
	flag.IntVar(&o.scale.SimClusters, "sim-clusters", o.scale.SimClusters, "Simulated clusters")
	flag.IntVar(&o.scale.Sets, "sets", o.scale.Sets, "Applications per simulated cluster")
	flag.IntVar(&o.scale.RealClusters, "real-clusters", o.scale.RealClusters, "Clusters with a real Argo CD")
	flag.IntVar(&o.scale.RealSets, "real-sets", o.scale.RealSets, "Applications per real cluster")
	flag.DurationVar(&o.timing.Downtime, "downtime", o.timing.Downtime, "How long components stay down")
	flag.Func("sim-arg", "An extra flag of the sim processes (repeatable; -v=4, say, to follow their events)", func(v string) error {
		o.scale.SimArgs = append(o.scale.SimArgs, v)
		return nil
	})
	flag.Func("server-arg", "An extra flag of the server instances (repeatable)", func(v string) error {
		o.scale.ServerArgs = append(o.scale.ServerArgs, v)
		return nil
	})
	flag.DurationVar(&o.timing.Timeout, "timeout", o.timing.Timeout, "How long a phase may take to converge")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func (o *options) run(ctx context.Context) error {
	cases, err := selectCases(matrix(), o.cases)
	if err != nil {
		return err
	}
	if o.workDir == "" {
		if o.workDir, err = os.MkdirTemp("", "argocd-pull-chaos-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.workDir, 0o750); err != nil {
		return err
	}
	closeLog, err := loopback.LogToFile(filepath.Join(o.workDir, "chaos.log"))
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
	fleetDir := filepath.Join(o.workDir, "fleet")
	if _, err := os.Stat(fleetDir); err == nil {
		return fmt.Errorf("%s holds an earlier run's fleet: remove it or choose another -work-dir", fleetDir)
	}
	results, err := runMatrix(ctx, fleetDir, bin, o.scale, o.timing, cases, logf)
	if err != nil {
		logf("work directory kept: %s", o.workDir)
		return err
	}
	table := markdown(results, "make chaos", loopback.Machine(), o.scale, o.timing)
	fmt.Println(table)
	if o.doc != "" && o.cases == "" {
		if err := writeSection(o.doc, table); err != nil {
			return err
		}
		logf("wrote the table into %s", o.doc)
	}
	if bad := failed(results); len(bad) > 0 {
		logf("work directory kept: %s", o.workDir)
		return fmt.Errorf("%d of %d phases failed", len(bad), len(results))
	}
	if !o.keep {
		_ = os.RemoveAll(o.workDir)
	}
	return nil
}

// selectCases keeps the baseline and the cases whose name matches expr (all when it is empty).
func selectCases(all []Case, expr string) ([]Case, error) {
	if expr == "" {
		return all, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("-cases: %w", err)
	}
	out := []Case{baseline}
	for _, c := range all[1:] {
		if re.MatchString(c.Name) {
			out = append(out, c)
		}
	}
	return out, nil
}

// runMatrix starts the fleet and runs the cases on it, one after the other, each on a clean fleet.
func runMatrix(ctx context.Context, dir, binary string, s Scale, t Timing, cases []Case, logf func(string, ...any)) ([]*Result, error) {
	logf("starting the fleet: %s", s)
	f, err := startFleet(ctx, dir, binary, s, logf)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	obs, err := newObserver(ctx, f)
	if err != nil {
		return nil, err
	}
	defer obs.close()
	r := &runner{f: f, obs: obs, timing: t, logf: logf, pace: map[string]float64{}}
	var results []*Result
	for i, c := range cases {
		if err := r.clean(ctx); err != nil {
			results = append(results, &Result{Case: c.Name, Phase: "start", Converged: -1, Backlog: -1, Failure: "the fleet is not clean: " + err.Error()})
			break
		}
		results = append(results, r.run(ctx, i, c)...)
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	return results, nil
}
