package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// TestChaos runs a subset of the matrix at a small scale, so that every `go test ./...` guards the recovery
// it measures: a double fault with the controller back after its server, and a silent partition of the
// agents' link (the real agent and the simulated ones), each during a rollout of about 200 Applications and
// during their deletion. Nothing may be lost, orphaned or left stale, and each phase must converge within
// 30 s beyond its backlog (the matrix's target is 10 s; the bound leaves room for a loaded test machine),
// plus keepalive's time to notice a partition.
func TestChaos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := t.TempDir()
	closeLog, err := loopback.LogToFile(filepath.Join(dir, "chaos.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	bin, err := loopback.BuildArgocdPull(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	scale := Scale{RealClusters: 1, RealSets: 2, SimClusters: 8, Sets: 25, SyncDelay: time.Second}
	timing := Timing{Downtime: 3 * time.Second, Gap: 2 * time.Second, Settle: 5 * time.Second,
		Timeout: 4 * time.Minute, RecoveryBound: 30 * time.Second}
	fleetDir := filepath.Join(os.TempDir(), "argocd-pull-chaos-"+time.Now().Format("150405.000"))
	results, err := runMatrix(ctx, fleetDir, bin, scale, timing, subset(), func(f string, a ...any) { t.Logf(f, a...) })
	t.Log("\n" + markdown(results, "go test ./test/chaos", loopback.Machine(), scale, timing))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*len(subset()) {
		t.Fatalf("%d results, want a rollout and a mass delete for each of %d cases", len(results), len(subset()))
	}
	for _, r := range results {
		if r.Failure != "" || r.Lost+r.Orphans+r.Stale > 0 || r.Converged < 0 || r.Applications != scale.Applications() {
			t.Errorf("%s, %s: %d Applications, lost %d, orphans %d, stale %d, converged after %s: %s",
				r.Case, r.Phase, r.Applications, r.Lost, r.Orphans, r.Stale, r.Converged, r.Failure)
		}
	}
	if t.Failed() {
		t.Logf("fleet kept in %s", fleetDir)
		return
	}
	_ = os.RemoveAll(fleetDir)
	table := markdown(results, "test", "machine", scale, timing)
	for _, want := range []string{"| none (baseline) | rollout | 0 | 0 | 0 |", "| network partition: agents ↔ servers | mass delete | 0 | 0 | 0 |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}
