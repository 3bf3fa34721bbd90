package badinput

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// cluster is the catalogue fleet's managed cluster.
const cluster = "cluster1"

// Limits of the catalogue's server, small so that oversize events are cheap to send.
const (
	maxEventBytes  = 256 << 10
	maxResyncBytes = 2 << 20
)

// env is the catalogue's fleet: the hub, PostgreSQL, argocd-pull server (mutual TLS) and the hub controller in
// the Maestro mode, and one managed cluster with the work agent and a real Argo CD.
type env struct {
	*localfleet.System
	binary  string
	hub     client.Client
	spoke   client.Client
	repoURL string
	argocd  *loopback.ArgoCD
}

var (
	dir      string
	shared   *env
	startErr error
	once     sync.Once
)

func TestMain(m *testing.M) {
	var err error
	if dir, err = os.MkdirTemp("", "argocd-pull-badinput-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if shared != nil {
		if code != 0 {
			shared.KeepDir()
			fmt.Fprintln(os.Stderr, "fleet logs kept in", shared.Dir)
		}
		shared.argocd.Stop()
		shared.Stop()
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// fleet starts the catalogue's fleet once, for the tests that need it.
func fleet(t *testing.T) *env {
	t.Helper()
	once.Do(func() { shared, startErr = start() })
	if startErr != nil {
		t.Fatal(startErr)
	}
	return shared
}

func start() (_ *env, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := loopback.BuildArgocdPull(ctx, dir)
	if err != nil {
		return nil, err
	}
	f, err := localfleet.Start(ctx, localfleet.Options{Dir: filepath.Join(dir, "fleet"), Clusters: []string{cluster},
		Transport: workclient.TransportGRPC, Binary: bin,
		ServerArgs: []string{fmt.Sprintf("--max-event-bytes=%d", maxEventBytes), fmt.Sprintf("--max-resync-bytes=%d", maxResyncBytes)}})
	if err != nil {
		return nil, err
	}
	e := &env{System: f, binary: bin}
	defer func() {
		if err != nil {
			f.KeepDir()
			f.Stop()
		}
	}()
	if e.hub, err = f.HubClient(); err != nil {
		return nil, err
	}
	if e.spoke, err = f.ClusterClient(cluster); err != nil {
		return nil, err
	}
	if err := f.Git.Commit(ctx, "catalogue", "a ConfigMap", map[string]string{
		"config/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: catalogue\ndata:\n  color: blue\n",
	}); err != nil {
		return nil, err
	}
	e.repoURL = f.Git.URL("catalogue")
	e.argocd, err = loopback.StartArgoCD(ctx, f.Env.Cluster(cluster), loopback.ArgoCDOptions{
		Dir: filepath.Join(f.Dir, "argocd-"+cluster), Namespace: localfleet.ArgoCDNamespace, Forward: []string{f.Git.Addr},
		ReconciliationTimeout: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}
