// Package loopback starts the real processes of a fleet on this machine: kube-apiservers (a hub and managed
// clusters) on a shared etcd with the Argo CD and OCM CRDs from the Go module cache, private PostgreSQL servers,
// Argo CD, KWOK and the control loops of a real cluster, OCM's placement controller, a git server, and Chromium. The demo and the tests use
// it; it holds no testing hooks (package testutil has TestMain's). Every process it starts listens on loopback
// or in a private network namespace and is stopped by Stop, or killed with the process that started it.
package loopback

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"
)

// Options configures an Env.
type Options struct {
	// Dir holds everything the environment writes. A new temporary directory when empty.
	Dir string
	// ManagedClusters names the managed clusters to start besides the hub.
	ManagedClusters []string
	// GarbageCollector starts kube-controller-manager's garbage collector and namespace controllers on
	// every cluster, so owner references cascade as on a real cluster.
	GarbageCollector bool
	// Workloads gives every managed cluster the control loops of a real one: kube-controller-manager's
	// deployment and replicaset controllers (and the garbage collector), kube-scheduler, and KWOK with one
	// simulated node that runs Pods (Running, Ready, with logs at its kubelet endpoint) without containers.
	Workloads bool
	// PlacementController runs OCM's placement controller on the hub, so that Placements are decided by OCM.
	PlacementController bool
	// Postgres starts a private PostgreSQL server, with PostgresSettings (name=value) beside the defaults.
	Postgres         bool
	PostgresSettings []string
	// Users are extra token identities on every cluster.
	Users []User
	// ControllerLog sends the logs of controllers run inside the test process to logs/in-process.log.
	ControllerLog bool
	// HubAPIServerArgs are extra flags of the hub's kube-apiserver; HubAPIServerEnv extra variables of its
	// environment (GOMEMLIMIT, say).
	HubAPIServerArgs, HubAPIServerEnv []string
	// HubWithoutProjectCRDs leaves argocd-pull's own CRDs (config/crd) off the hub, for tests of what installs
	// them (the Helm chart).
	HubWithoutProjectCRDs bool
}

// Env is a running hub, its managed clusters and, if asked for, PostgreSQL.
type Env struct {
	Dir      string
	Hub      *Cluster
	Managed  []*Cluster
	Postgres *Postgres

	etcd    *Etcd
	ca      *CA
	ownsDir bool
}

// HubName is the name of the hub cluster.
const HubName = "hub"

// apiserverArgs are the extra apiserver flags of the named cluster.
func apiserverArgs(name string, opts Options, ca *CA) []string {
	if name == HubName {
		return opts.HubAPIServerArgs
	}
	if opts.Workloads {
		return kubeletArgs(ca)
	}
	return nil
}

// apiserverEnv is the extra environment of the named cluster's apiserver.
func apiserverEnv(name string, opts Options) []string {
	if name == HubName {
		return opts.HubAPIServerEnv
	}
	return nil
}

// Start starts an environment. On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	env := &Env{Dir: opts.Dir}
	if env.Dir == "" {
		if env.Dir, err = os.MkdirTemp("", "argocd-pull-loopback-"); err != nil {
			return nil, fmt.Errorf("create loopback dir: %w", err)
		}
		env.ownsDir = true
	}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()

	if err := os.MkdirAll(filepath.Join(env.Dir, "logs"), 0o750); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	if opts.ControllerLog {
		if err := logToFile(env.Dir); err != nil {
			return nil, err
		}
	}
	if env.etcd, err = startEtcd(ctx, env.Dir); err != nil {
		return nil, err
	}
	if opts.Workloads {
		if env.ca, err = NewCA(filepath.Join(env.Dir, "ca")); err != nil {
			return nil, err
		}
	}
	saKey := filepath.Join(env.Dir, "sa.key")
	if err := writeServiceAccountKey(saKey); err != nil {
		return nil, err
	}

	names := append([]string{HubName}, opts.ManagedClusters...)
	clusters := make([]*Cluster, len(names))
	g, gctx := errgroup.WithContext(ctx)
	for i, name := range names {
		g.Go(func() (err error) {
			clusters[i], err = env.startCluster(gctx, name, opts, saKey)
			return err
		})
	}
	if opts.Postgres {
		g.Go(func() error {
			pg, err := StartPostgres(gctx, filepath.Join(env.Dir, "postgres"), opts.PostgresSettings...)
			env.Postgres = pg
			return err
		})
	}
	err = g.Wait()
	for _, c := range clusters {
		if c == nil {
			continue
		}
		if c.Name == HubName {
			env.Hub = c
		} else {
			env.Managed = append(env.Managed, c)
		}
	}
	if err != nil {
		return nil, err
	}
	return env, nil
}

// startCluster starts one cluster's apiserver on the shared etcd, installs its CRDs (the hub's and a managed
// cluster's sets differ) and its control loops: a managed cluster's workload controllers and KWOK, or the
// garbage collector, and on the hub OCM's placement controller.
func (e *Env) startCluster(ctx context.Context, name string, opts Options, saKey string) (*Cluster, error) {
	c, err := startAPIServer(ctx, apiserverSpec{
		name:    name,
		dir:     filepath.Join(e.Dir, name),
		etcdURL: e.etcd.URL,
		users:   opts.Users,
		saKey:   saKey,
		args:    apiserverArgs(name, opts, e.ca),
		env:     apiserverEnv(name, opts),
	})
	if err != nil {
		return nil, fmt.Errorf("start cluster %s: %w", name, err)
	}
	sets := []CRDSet{ArgoCDCRDs, OCMSpokeCRDs}
	if name == HubName {
		sets = []CRDSet{ArgoCDCRDs, OCMHubCRDs}
		if !opts.HubWithoutProjectCRDs {
			sets = append(sets, ProjectCRDs)
		}
	}
	var files []string
	for _, set := range sets {
		f, err := CRDFiles(set)
		if err != nil {
			return c, err
		}
		files = append(files, f...)
	}
	if err := InstallCRDs(ctx, c.Config(), files); err != nil {
		return c, fmt.Errorf("install crds on %s: %w", name, err)
	}
	switch {
	case opts.Workloads && name != HubName:
		return c, c.startWorkloads(ctx, e.ca)
	case opts.GarbageCollector || opts.Workloads:
		if err := c.startGarbageCollector(ctx); err != nil {
			return c, err
		}
	}
	if opts.PlacementController && name == HubName {
		return c, c.startPlacementController(ctx)
	}
	return c, nil
}

// Cluster returns a managed cluster by name.
func (e *Env) Cluster(name string) *Cluster {
	for _, c := range e.Managed {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// KeepDir keeps the environment's directory (and its logs) when it stops.
func (e *Env) KeepDir() { e.ownsDir = false }

// Stop stops every process and removes the directory the environment created.
func (e *Env) Stop() {
	e.stopProcesses()
	if e.ownsDir {
		_ = os.RemoveAll(e.Dir)
	}
}

func (e *Env) stopProcesses() {
	var g errgroup.Group
	for _, c := range append([]*Cluster{e.Hub}, e.Managed...) {
		if c != nil {
			g.Go(func() error { c.Stop(); return nil })
		}
	}
	if e.Postgres != nil {
		g.Go(func() error { e.Postgres.Stop(); return nil })
	}
	_ = g.Wait()
	if e.etcd != nil {
		e.etcd.stop()
	}
}

// EtcdPid is the process ID of the shared etcd.
func (e *Env) EtcdPid() int { return e.etcd.proc.Pid() }
