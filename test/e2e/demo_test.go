package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `argocd-pull demo` as `make demo` does (detached, one managed cluster to keep it short): it
// returns once every Application is Synced and Healthy, leaves the fleet running, and `demo down` stops it. The
// second run is the CMP variant (`make demo DEMO_FLAGS=--cmp`).
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		// The table is the status command's: APPLICATION APPLICATIONSET CLUSTER SYNC HEALTH MESSAGE.
		{name: "pull", want: []string{`cluster1-guestbook +guestbook +cluster1 +Synced +Healthy`, `get applications -A`}},
		{name: "cmp", flags: []string{"--cmp"}, want: []string{`cluster1-guestbook-cmp +\S+ +\S+ +Synced +Healthy`, `get manifestworks -n cluster1`}},
	} {
		t.Run(tc.name, func(t *testing.T) { testDemo(t, tc.flags, tc.want) })
	}
}

func testDemo(t *testing.T, flags, want []string) {
	dir := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	args := append([]string{"demo", "--detach", "--dir", dir, "--clusters", "1"}, flags...)
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput() //nolint:gosec // our binary
	t.Cleanup(func() {
		_ = exec.Command(binary, "demo", "down", "--dir", dir).Run() //nolint:gosec // our binary
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range append(want, `The fleet is running\.`, `make demo-down`) {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// Still running: a second demo in the same directory is refused.
	if again, err := exec.CommandContext(ctx, binary, "demo", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(again), "already running") { //nolint:gosec // our binary
		t.Errorf("second demo: %v\n%s", err, again)
	}
	down, err := exec.CommandContext(ctx, binary, "demo", "down", "--dir", dir).CombinedOutput() //nolint:gosec // our binary
	if err != nil || !strings.Contains(string(down), "demo stopped") {
		t.Fatalf("demo down: %v\n%s", err, down)
	}
}
