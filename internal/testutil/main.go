package testutil

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// mainStartTimeout bounds the start of a test package's environment: generous, since a loaded machine starts
// apiservers slowly, and still an error rather than a hang when one never comes up.
const mainStartTimeout = 10 * time.Minute

// Main starts a loopback environment for a test package, runs its tests and stops it; call it from TestMain.
// When a test fails the directory with every process's log is kept and its path printed.
func Main(m *testing.M, opts loopback.Options, env **loopback.Env) int {
	ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
	started, err := loopback.Start(loopback.WithProgress(ctx, func(s string) { fmt.Fprintln(os.Stderr, "loopback:", s) }), opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "loopback: %v\n", err)
		return 1
	}
	*env = started
	code := m.Run()
	if code != 0 {
		started.KeepDir()
		fmt.Fprintf(os.Stderr, "loopback: tests failed; logs kept in %s\n", started.Dir)
	}
	started.Stop()
	return code
}
