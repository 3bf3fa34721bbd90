package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
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
		{name: "pull", want: []string{`cluster1-guestbook +guestbook +cluster1 +Synced +Healthy`, `get applications -A`,
			`/applications/argocd/cluster1-guestbook\?view=tree`}},
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
	if len(flags) == 0 {
		checkDemoTree(ctx, t, string(out))
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

// checkDemoTree logs in to the hub's Argo CD UI the demo printed and reads the guestbook's resource tree: its
// Pod comes from the managed cluster through the console.
func checkDemoTree(ctx context.Context, t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`The hub's Argo CD web UI: (http://\S+) \(user admin, password (\S+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("the demo printed no Argo CD UI address:\n%s", out)
		return
	}
	argo := &loopback.HubArgoCD{URL: m[1], AdminPassword: m[2]}
	token, err := argo.Login(ctx)
	if err != nil {
		t.Errorf("log in to the demo's Argo CD: %v", err)
		return
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "the demo's guestbook tree with its Pod", func() error {
		tree, err := argocdAPI(ctx, m[1]+"/api/v1/applications/cluster1-guestbook/resource-tree?appNamespace=argocd", token)
		if err != nil {
			return err
		}
		if !strings.Contains(tree, `"kind":"Pod"`) {
			return fmt.Errorf("no Pod in the tree: %.300s", tree)
		}
		return nil
	})
}
