package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
)

// The integration tests share one PostgreSQL and one hub apiserver, each started by the first test that needs
// it and stopped after the last.
var (
	sharedDir  string
	pgOnce     sync.Once
	pg         *loopback.Postgres
	pgErr      error
	kubeOnce   sync.Once
	kubeEnv    *loopback.Env
	kubeEnvErr error
)

func TestMain(m *testing.M) {
	if os.Getenv(memoryChildEnv) != "" {
		os.Exit(memoryChild())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	reconnect.Install() // for reconnect.OnStuck
	// Reconnect quickly after a server restart, as the other packages' tests do.
	clients.DelayFn = func() time.Duration { return 300 * time.Millisecond }
	dir, err := os.MkdirTemp("", "sim-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sharedDir = dir
	code := m.Run()
	if pg != nil {
		pg.Stop()
	}
	if kubeEnv != nil {
		kubeEnv.Stop()
	}
	_ = os.RemoveAll(dir)
	return code
}

// postgres returns the shared PostgreSQL server.
func postgres(t testing.TB) *loopback.Postgres {
	t.Helper()
	pgOnce.Do(func() {
		pg, pgErr = loopback.StartPostgres(context.Background(), filepath.Join(sharedDir, "postgres"))
	})
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pg
}

// hubEnv returns the shared hub apiserver.
func hubEnv(t testing.TB) *loopback.Env {
	t.Helper()
	kubeOnce.Do(func() {
		kubeEnv, kubeEnvErr = loopback.Start(context.Background(), loopback.Options{Dir: filepath.Join(sharedDir, "kube")})
	})
	if kubeEnvErr != nil {
		t.Fatal(kubeEnvErr)
	}
	return kubeEnv
}
