// Package localfleet brings up a whole argocd-pull fleet on loopback: a hub and managed clusters (real
// kube-apiservers), the hub controller, an agent and a real Argo CD per managed cluster, Argo CD's
// ApplicationSet controller on the hub, a git server, and in the Maestro mode PostgreSQL and argocd-pull
// server. The end-to-end tests and `argocd-pull demo` use it. It runs the project's own binary and the
// real components as processes, on loopback only, and keeps all their state below one directory.
package localfleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/argocd-pull/argocd-pull/internal/cmp"
	"github.com/argocd-pull/argocd-pull/internal/gitopscluster"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Options configure a fleet.
type Options struct {
	// Dir holds the fleet's state: kubeconfigs, certificates, logs. A temporary directory when empty.
	Dir string
	// Clusters names the managed clusters.
	Clusters []string
	// Transport is grpc (Maestro mode: PostgreSQL and argocd-pull server) or kube (ManifestWorks on the hub).
	Transport string
	// MigrationTransport is the other transport, run beside Transport so that `argocd-pull migrate` can move
	// clusters between them: the controller runs both (--migration-transport), and PostgreSQL and the server run
	// if either is grpc. The agents start with Transport's driver; StartAgentDriver starts the others.
	MigrationTransport string
	// Binary is the argocd-pull binary the fleet runs.
	Binary string
	// ArgoCD starts a real Argo CD on each managed cluster, and on the hub the Argo CD console (argocd-server
	// with its web UI, a repo server, redis) and the ApplicationSet controller. The managed clusters then also
	// run Deployments: controllers, a scheduler and a KWOK node (loopback.Options.Workloads).
	ArgoCD bool
	// CMP runs the CMP variant with ArgoCD (docs/cmp.md): the hub's Argo CD reconciles Applications itself, with
	// its application controller, argocd-pull's Config Management Plugin as an argocd-cmp-server sidecar of its
	// repo server and the ManifestWork health check in argocd-cm; the managed clusters run the work agent and no
	// Argo CD. It needs the kube transport (the works are ManifestWork objects on the hub).
	CMP bool
	// Simulated leaves the managed clusters to a simulator (argocd-pull sim): no managed apiservers, agents or
	// Argo CD are started; the clusters are registered on the hub and, in the Maestro mode, on the server.
	Simulated bool
	// SimulatedConsole runs the console's hub side for Simulated clusters (Maestro mode): a hub redis behind
	// argocd-pull server's redis proxy, its kube proxy, and the GitOpsCluster's console credentials, so that
	// the simulator's console streams (sim --console) can be measured without an argocd-server.
	SimulatedConsole bool
	// ServerInstances is how many instances of argocd-pull server share the database (Maestro mode; 0 means
	// one). The agents are spread over them by cluster, in turn; the controller uses the last one.
	ServerInstances int
	// Simulator adds simulated managed clusters to the real ones (Maestro mode): argocd-pull sim processes of
	// the fleet's own, one per server instance.
	Simulator *Simulator
	// NetworkFaults routes every connection to argocd-pull server and to PostgreSQL through a relay of the
	// fleet's, which Kill and Restart of the network components (ComponentNetworkAgents…) cut and restore.
	NetworkFaults bool
	// ServerArgs are extra flags of argocd-pull server.
	ServerArgs []string
	// ControllerArgs are extra flags of the hub controller.
	ControllerArgs []string
	// ServerEnv and ControllerEnv are extra environment variables of argocd-pull server and of the hub
	// controller (GOMEMLIMIT, say).
	ServerEnv, ControllerEnv []string
	// HubAPIServerArgs are extra flags of the hub's kube-apiserver; HubAPIServerEnv extra variables of its
	// environment.
	HubAPIServerArgs, HubAPIServerEnv []string
	// PostgresSettings are extra PostgreSQL settings (name=value; Maestro mode).
	PostgresSettings []string
	// Progress receives a line per step; nil for silence.
	Progress func(string)
}

// System is a running fleet on loopback: the processes of the hub and its managed clusters. (sim.Fleet is a
// different thing: simulated managed clusters in one process.)
type System struct {
	Options
	Env *loopback.Env
	Git *loopback.GitServer
	// Server is argocd-pull server's addresses (Maestro mode); with several instances, the first one's.
	Server Endpoints
	// AdminToken may use the server's REST API as an admin.
	AdminToken string
	// ControllerMetrics is the hub controller's metrics address.
	ControllerMetrics string
	// HubArgoCD is the hub's Argo CD console (with Options.ArgoCD): its URL and admin password.
	HubArgoCD *loopback.HubArgoCD
	// Console is where argocd-pull server's console listens (Maestro mode with Argo CD): its redis proxy, which
	// the hub's argocd-server uses as its redis, and its proxy to the managed clusters' API, the cluster
	// secrets' proxyUrl. Empty without the console.
	Console ConsoleEndpoints

	ca         *loopback.CA
	servers    []*serverInstance
	controller *loopback.Process
	agents     map[string]*loopback.Process
	argocd     map[string]*loopback.ArgoCD
	appset     *loopback.Process
	hubRedis   *loopback.Process
	simulators []*simulatorProcess
	relays     map[string][]*loopback.Relay
	// realClusters are the managed clusters with an apiserver and an agent of their own.
	realClusters []string
	// controllerHealth is the hub controller's /healthz and /readyz address.
	controllerHealth string
	tokens           map[string]string
	serverClient     *restapi.Client
	// exits is what OnExit asked for.
	exits exitWatch
}

// exitWatch calls its callback once, when a hub process it watches exits other than by the System's Kill,
// Shutdown or Restart.
type exitWatch struct {
	mu       sync.Mutex
	ctx      context.Context
	exited   func(error)
	once     sync.Once
	expected map[*loopback.Process]bool
}

// Endpoints are the listeners of argocd-pull server.
type Endpoints struct {
	Source, Agent, HTTP string
}

// ConsoleEndpoints are the console's addresses: argocd-pull server's redis proxy and kube proxy, the hub's
// redis behind the redis proxy, and where each managed cluster's Argo CD redis is reachable for its agent.
type ConsoleEndpoints struct {
	RedisProxy, KubeProxy, HubRedis string
	ClusterRedis                    map[string]string
}

// consoleOn reports whether the fleet runs the console: Maestro mode with real Argo CD on the managed clusters,
// or with simulated clusters that answer it.
func (o Options) consoleOn() bool {
	if o.Transport != workclient.TransportGRPC || o.CMP {
		return false
	}
	if o.Simulated {
		return o.SimulatedConsole
	}
	return o.ArgoCD
}

// planConsole chooses the console's addresses, which the server, the agents and the hub's Argo CD are told
// before they start. Without Argo CD on the hub (simulated clusters), it starts the hub's redis itself.
func (f *System) planConsole(ctx context.Context) error {
	if !f.consoleOn() {
		return nil
	}
	ports, err := loopback.FreePorts(3 + len(f.realClusters))
	if err != nil {
		return err
	}
	f.Console = ConsoleEndpoints{RedisProxy: addr(ports[0]), KubeProxy: addr(ports[1]), HubRedis: addr(ports[2]),
		ClusterRedis: map[string]string{}}
	for i, c := range f.realClusters {
		f.Console.ClusterRedis[c] = addr(ports[3+i])
	}
	if f.Simulated {
		f.hubRedis, f.Console.HubRedis, err = loopback.StartRedis(ctx, f.Env.Dir, "hub-redis")
	}
	return err
}

// ArgoCDNamespace is where Argo CD runs on every cluster, and where the hub's Applications live.
const ArgoCDNamespace = "argocd"

// GitOpsClusterName is the fleet's GitOpsCluster in ArgoCDNamespace.
const GitOpsClusterName = "argocd-pull"

// Start brings the fleet up. On error everything started is stopped. Its steps have no time limits of their
// own: ctx's deadline bounds the whole start, and a step that takes a while says what it waits for.
func Start(ctx context.Context, o Options) (_ *System, err error) {
	if o.Transport == "" {
		o.Transport = workclient.TransportGRPC
	}
	if o.CMP && (o.Transport != workclient.TransportKube || !o.ArgoCD) {
		return nil, errors.New("the CMP variant needs the kube transport and Argo CD")
	}
	if (o.Simulator != nil || o.ServerInstances > 1 || o.NetworkFaults) && o.Transport != workclient.TransportGRPC {
		return nil, errors.New("simulated clusters beside real ones, several server instances and network faults need the grpc transport")
	}
	f := &System{Options: o, agents: map[string]*loopback.Process{}, argocd: map[string]*loopback.ArgoCD{}, tokens: map[string]string{},
		relays: map[string][]*loopback.Relay{}}
	if !o.Simulated {
		f.realClusters = o.Clusters
	}
	if o.Simulator != nil {
		f.Clusters = append(slices.Clone(o.Clusters), o.Simulator.names()...)
	}
	ctx = loopback.WithProgress(ctx, func(s string) { f.progress("%s", s) })
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	clusters := strings.Join(f.realClusters, ", ")
	if len(f.realClusters) == 0 {
		clusters = "no managed cluster"
	}
	if simulated := len(f.Clusters) - len(f.realClusters); simulated > 0 {
		clusters += fmt.Sprintf(" (%d are simulated)", simulated)
	}
	f.progress("starting etcd, kube-apiservers for the hub and %s, garbage collectors, OCM's placement controller%s", clusters,
		map[bool]string{true: ", PostgreSQL", false: ""}[f.runs(workclient.TransportGRPC)])
	f.Env, err = loopback.Start(ctx, loopback.Options{Dir: o.Dir, ManagedClusters: f.realClusters, GarbageCollector: true,
		Workloads: o.ArgoCD, PlacementController: true,
		Postgres: f.runs(workclient.TransportGRPC), PostgresSettings: o.PostgresSettings,
		HubAPIServerArgs: o.HubAPIServerArgs, HubAPIServerEnv: o.HubAPIServerEnv})
	if err != nil {
		return nil, err
	}
	f.Dir = f.Env.Dir
	if err := f.planConsole(ctx); err != nil {
		return nil, err
	}
	if f.Git, err = loopback.StartGitServer(f.Dir); err != nil {
		return nil, err
	}
	if err := f.prepareHub(ctx); err != nil {
		return nil, err
	}
	if f.runs(workclient.TransportGRPC) {
		if err := f.startServer(ctx); err != nil {
			return nil, err
		}
	}
	if err := f.startAgents(ctx); err != nil {
		return nil, err
	}
	if err := f.startSimulators(ctx); err != nil {
		return nil, err
	}
	if err := f.startController(ctx); err != nil {
		return nil, err
	}
	if o.ArgoCD && len(f.realClusters) > 0 {
		if err := f.startArgoCD(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// runs reports whether the fleet runs a transport.
func (f *System) runs(transport string) bool {
	return f.Transport == transport || f.MigrationTransport == transport
}

func (f *System) progress(format string, args ...any) {
	if f.Progress != nil {
		f.Progress(fmt.Sprintf(format, args...))
	}
}

func (f *System) logPath(name string) string { return filepath.Join(f.Dir, "logs", name+".log") }

// run starts the argocd-pull binary.
func (f *System) run(name string, args ...string) (*loopback.Process, error) {
	return f.runWith(name, nil, args...)
}

// runWith starts an argocd-pull process with extra environment variables.
func (f *System) runWith(name string, env []string, args ...string) (*loopback.Process, error) {
	return loopback.StartProcess(loopback.ProcessSpec{Name: name, Path: f.Binary, Args: args, Env: env, LogPath: f.logPath(name)})
}

// startServer starts argocd-pull server (ServerInstances of it on one database) with mutual TLS (a client
// certificate per agent, named after its cluster, and one for the controller) and registers the managed
// clusters as consumers. Bearer tokens remain for the REST admin and for simulated clusters (a token each),
// which would otherwise need thousands of certificates.
func (f *System) startServer(ctx context.Context) error {
	instances := max(f.ServerInstances, 1)
	f.progress("starting argocd-pull server (%d instance(s), mutual TLS, a client certificate per cluster) on PostgreSQL", instances)
	db, err := f.Env.Postgres.CreateDatabase(ctx, "argocd_pull")
	if err != nil {
		return err
	}
	if db, err = f.relayDatabase(db); err != nil {
		return err
	}
	if f.ca, err = loopback.NewCA(filepath.Join(f.Dir, "pki")); err != nil {
		return err
	}
	cert, key, err := f.ca.Issue("argocd-pull-server", true)
	if err != nil {
		return err
	}
	f.AdminToken = loopback.RandomToken()
	lines := []string{f.AdminToken + ",admin"}
	for _, c := range f.simulatedClusters() {
		f.tokens["agent/"+c] = loopback.RandomToken()
		lines = append(lines, f.tokens["agent/"+c]+",agent,"+c)
	}
	tokenFile := f.TokenFile()
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(f.Dir, "pki", "admin.token"), []byte(f.AdminToken), 0o600); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	for i := range instances {
		ports, err := loopback.FreePorts(3)
		if err != nil {
			return err
		}
		e := Endpoints{Source: addr(ports[0]), Agent: addr(ports[1]), HTTP: addr(ports[2])}
		args := []string{"server", "--database-url", db,
			"--source-grpc-bind-address", e.Source, "--agent-grpc-bind-address", e.Agent, "--http-bind-address", e.HTTP,
			"--tls-cert-file", cert, "--tls-key-file", key, "--client-ca-file", f.ca.CertFile, "--token-file", tokenFile}
		if f.consoleOn() && i == 0 {
			// The console's proxies listen on the first instance only.
			args = append(args, "--console-redis-bind-address", f.Console.RedisProxy,
				"--console-redis-upstream", f.Console.HubRedis, "--console-proxy-bind-address", f.Console.KubeProxy,
				"--hub-kubeconfig", f.Env.Hub.Kubeconfig, "--console-tls-secret", ArgoCDNamespace+"/"+gitopscluster.ConsoleTLSSecret,
				"--console-argocd-namespace", ArgoCDNamespace)
		}
		f.servers = append(f.servers, &serverInstance{name: serverName(i), Endpoints: e, args: append(args, f.ServerArgs...)})
		if err := f.runServer(f.servers[i]); err != nil {
			return err
		}
	}
	f.Server = f.servers[0].Endpoints
	f.serverClient, err = restapi.New(restapi.Config{URL: "https://" + f.Server.HTTP, Token: f.AdminToken,
		TLS: restapi.TLS{CAFile: f.ca.CertFile}})
	if err != nil {
		return err
	}
	for _, s := range f.servers {
		if err := f.waitServer(ctx, s); err != nil {
			return err
		}
	}
	if err := f.relayServers(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, c := range f.Clusters {
		g.Go(func() error { return f.serverClient.EnsureConsumer(gctx, c) })
	}
	return g.Wait()
}

// ServerClient is a client of the server's REST API (Maestro mode): it trusts the fleet's CA and calls as
// the admin.
func (f *System) ServerClient() *restapi.Client { return f.serverClient }

// grpcConfig issues a client certificate for an identity (agent:<cluster>, source:<id>) and writes an sdk-go
// gRPC client config with the CA and that certificate.
func (f *System) grpcConfig(name, url, identity string) (string, error) {
	cert, key, err := f.ca.Issue(identity, false)
	if err != nil {
		return "", err
	}
	path := filepath.Join(f.Dir, "pki", name+"-grpc.yaml")
	content := fmt.Sprintf("url: %s\ncaFile: %s\nclientCertFile: %s\nclientKeyFile: %s\n", url, f.ca.CertFile, cert, key)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return "", fmt.Errorf("write grpc config %s: %w", name, err)
	}
	return path, nil
}

func (f *System) startAgents(ctx context.Context) error {
	if len(f.realClusters) == 0 {
		return nil
	}
	f.progress("starting the work agent of %s (driver %s)", strings.Join(f.realClusters, ", "), f.Transport)
	for _, c := range f.realClusters {
		if err := f.StartAgent(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// StartAgent starts (or restarts) the agent of a managed cluster, with the fleet's transport as its driver.
func (f *System) StartAgent(ctx context.Context, cluster string) error {
	return f.StartAgentDriver(ctx, cluster, f.Transport)
}

// agentKey names the agent of a cluster with a driver: the cluster's name for the fleet's transport.
func (f *System) agentKey(cluster, driver string) string {
	if driver == f.Transport {
		return cluster
	}
	return cluster + "-" + driver
}

// StopAgent stops the agent of a cluster with a driver.
func (f *System) StopAgent(cluster, driver string) {
	if p := f.agents[f.agentKey(cluster, driver)]; p != nil {
		p.Stop(10 * time.Second)
	}
}

// StartAgentDriver starts (or restarts) the agent of a managed cluster with a driver: while `argocd-pull migrate`
// moves a cluster, a kube and a grpc agent run side by side on it (with their own agent IDs).
func (f *System) StartAgentDriver(ctx context.Context, cluster, driver string) error {
	key := f.agentKey(cluster, driver)
	if p := f.agents[key]; p != nil {
		p.Stop(10 * time.Second)
	}
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	args := []string{"agent", "--cluster-name", cluster, "--driver", driver,
		"--kubeconfig", f.Env.Cluster(cluster).Kubeconfig, "--health-address", addr(port)}
	if driver == workclient.TransportGRPC {
		cfg, err := f.grpcConfig("agent-"+cluster, f.agentURL(slices.Index(f.realClusters, cluster)), "agent:"+cluster)
		if err != nil {
			return err
		}
		args = append(args, "--grpc-config", cfg)
		if f.consoleOn() {
			args = append(args, "--console-redis-address", f.Console.ClusterRedis[cluster], "--argocd-namespace", ArgoCDNamespace)
		}
	} else {
		args = append(args, "--hub-kubeconfig", f.Env.Hub.Kubeconfig)
	}
	p, err := f.run("agent-"+key, args...)
	if err != nil {
		return err
	}
	f.agents[key] = p
	return waitHTTP(ctx, p, http.DefaultClient, "http://"+addr(port)+"/healthz")
}

// StartController starts (or restarts) the hub controller.
func (f *System) StartController(ctx context.Context) error { return f.startController(ctx) }

func (f *System) startController(ctx context.Context) error {
	f.progress("starting the hub controller (transport %s)", f.Transport)
	if err := f.startControllerProcess(); err != nil {
		return err
	}
	return f.waitController(ctx)
}

// startControllerProcess starts (or restarts) the hub controller's process, on the addresses it had before: a
// restarted controller's metrics are read where they were.
func (f *System) startControllerProcess() error {
	if f.controller != nil {
		f.expectExit(f.controller)
		f.controller.Stop(10 * time.Second)
	}
	if f.ControllerMetrics == "" {
		ports, err := loopback.FreePorts(2)
		if err != nil {
			return err
		}
		f.ControllerMetrics, f.controllerHealth = addr(ports[0]), addr(ports[1])
	}
	args := []string{"controller", "--kubeconfig", f.Env.Hub.Kubeconfig, "--transport", f.Transport,
		"--metrics-bind-address", f.ControllerMetrics, "--health-probe-bind-address", f.controllerHealth}
	if f.MigrationTransport != "" {
		args = append(args, "--migration-transport", f.MigrationTransport)
	}
	if f.runs(workclient.TransportGRPC) {
		server := f.controllerServer()
		cfg, err := f.grpcConfig("controller", server.Source, "source:argocd-pull")
		if err != nil {
			return err
		}
		args = append(args, "--grpc-config", cfg, "--server-url", "https://"+server.HTTP, "--source-id", "argocd-pull")
	}
	p, err := f.runWith("controller", f.ControllerEnv, append(args, f.ControllerArgs...)...)
	if err != nil {
		return err
	}
	f.controller = p
	f.watchExit(p)
	return nil
}

// startArgoCD starts Argo CD on every managed cluster and the hub's Argo CD console, in parallel, then the
// ApplicationSet controller on the hub with the hub's repo server.
func (f *System) startArgoCD(ctx context.Context) error {
	if f.CMP {
		f.progress("starting Argo CD on the hub: argocd-server with its web UI, a repo server with argocd-pull's plugin " +
			"(argocd-cmp-server), the application controller and the ApplicationSet controller; no Argo CD on the managed clusters")
	} else {
		f.progress("starting Argo CD (redis, repo server, application controller) on %s, and on the hub argocd-server "+
			"with its web UI, a repo server and the ApplicationSet controller", strings.Join(f.realClusters, ", "))
	}
	argos := make([]*loopback.ArgoCD, len(f.realClusters))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		opts, err := f.hubArgoCDOptions()
		if err != nil {
			return err
		}
		f.HubArgoCD, err = loopback.StartHubArgoCD(gctx, f.Env.Hub, opts)
		return err
	})
	for i, c := range f.realClusters {
		if f.CMP {
			break
		}
		g.Go(func() error {
			a, err := loopback.StartArgoCD(gctx, f.Env.Cluster(c), loopback.ArgoCDOptions{
				Dir: filepath.Join(f.Dir, "argocd-"+c), Namespace: ArgoCDNamespace, Forward: []string{f.Git.Addr},
				ReconciliationTimeout: 30 * time.Second, RedisHostAddr: f.Console.ClusterRedis[c],
			})
			argos[i] = a
			return err
		})
	}
	err := g.Wait()
	for i, a := range argos {
		if a != nil {
			f.argocd[f.realClusters[i]] = a
		}
	}
	if err != nil {
		return err
	}
	f.appset, err = loopback.StartApplicationSetController(ctx, f.Env.Hub, ArgoCDNamespace,
		filepath.Join(f.Dir, "applicationset-controller"), f.HubArgoCD.RepoServer)
	return err
}

// hubArgoCDOptions are the settings of the hub's Argo CD; in the CMP variant with its application controller,
// argocd-pull's plugin (this fleet's binary, reading Applications with the hub's admin kubeconfig) and the
// ManifestWork health check.
func (f *System) hubArgoCDOptions() (loopback.HubArgoCDOptions, error) {
	opts := loopback.HubArgoCDOptions{Dir: filepath.Join(f.Dir, "argocd-hub"), Namespace: ArgoCDNamespace,
		Redis: f.Console.HubRedis, ServerRedis: f.Console.RedisProxy}
	if !f.CMP {
		return opts, nil
	}
	// The plugin's generate command is `argocd-pull cmp generate`, found on its PATH.
	binDir := filepath.Join(f.Dir, "argocd-hub", "argocd-pull-bin")
	if err := os.MkdirAll(binDir, 0o750); err != nil {
		return opts, fmt.Errorf("create %s: %w", binDir, err)
	}
	bin, err := filepath.Abs(f.Binary)
	if err != nil {
		return opts, err
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "argocd-pull")); err != nil && !os.IsExist(err) {
		return opts, fmt.Errorf("link argocd-pull for the plugin: %w", err)
	}
	opts.ApplicationController = true
	opts.Plugins = []loopback.CMPPlugin{{Name: cmp.PluginName, Config: []byte(cmp.PluginConfig), Path: []string{binDir},
		Env: []string{"KUBECONFIG=" + f.Env.Hub.Kubeconfig}}}
	opts.Settings = map[string]string{cmp.HealthCustomizationKey: cmp.HealthLua, "timeout.reconciliation": "30s"}
	return opts, nil
}

// Stop stops everything.
func (f *System) Stop() {
	var procs []*loopback.Process
	procs = append(procs, f.appset, f.controller, f.hubRedis)
	for _, p := range f.agents {
		procs = append(procs, p)
	}
	for _, s := range f.simulators {
		procs = append(procs, s.proc)
	}
	for _, s := range f.servers {
		procs = append(procs, s.proc)
	}
	for _, p := range procs {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	for _, rs := range f.relays {
		for _, r := range rs {
			r.Close()
		}
	}
	for _, a := range f.argocd {
		a.Stop()
	}
	if f.HubArgoCD != nil {
		f.HubArgoCD.Stop()
	}
	if f.Git != nil {
		f.Git.Stop()
	}
	if f.Env != nil {
		f.Env.Stop()
	}
}

// AgentToken is the server token of a simulated cluster's agent (Maestro mode; real agents have a client
// certificate instead).
func (f *System) AgentToken(cluster string) string { return f.tokens["agent/"+cluster] }

// TokenFile is the server's token file (Maestro mode): the admin's token and, with Simulated, an agent token
// for each cluster (`argocd-pull sim --agent-token-file`).
func (f *System) TokenFile() string { return filepath.Join(f.Dir, "pki", "tokens.csv") }

// CAFile is the fleet's CA certificate (Maestro mode).
func (f *System) CAFile() string { return f.ca.CertFile }

// AdminTokenFile is the file that holds AdminToken (Maestro mode).
func (f *System) AdminTokenFile() string { return filepath.Join(f.Dir, "pki", "admin.token") }

// OnExit calls exited, once, with the error of the first of the hub controller and the servers to exit before
// ctx ends, other than by Kill, Shutdown or Restart (a process these start is watched in its turn). The fleet
// does not restart them, as their Deployments would: whoever waits for the fleet to converge (a benchmark)
// waits in vain once one of them is gone.
func (f *System) OnExit(ctx context.Context, exited func(error)) {
	f.exits.mu.Lock()
	f.exits.ctx, f.exits.exited = ctx, exited
	f.exits.mu.Unlock()
	f.watchExit(f.controller)
	for _, s := range f.servers {
		f.watchExit(s.proc)
	}
}

// watchExit tells OnExit's callback when p exits, unless expectExit said it would.
func (f *System) watchExit(p *loopback.Process) {
	w := &f.exits
	w.mu.Lock()
	ctx, exited := w.ctx, w.exited
	w.mu.Unlock()
	if p == nil || exited == nil {
		return
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-p.Exited():
			w.mu.Lock()
			expected := w.expected[p]
			w.mu.Unlock()
			if !expected {
				w.once.Do(func() { exited(p.ExitError()) })
			}
		}
	}()
}

// expectExit tells OnExit's watch that p is being stopped on purpose.
func (f *System) expectExit(p *loopback.Process) {
	if p == nil {
		return
	}
	f.exits.mu.Lock()
	defer f.exits.mu.Unlock()
	if f.exits.expected == nil {
		f.exits.expected = map[*loopback.Process]bool{}
	}
	f.exits.expected[p] = true
}

// ControllerPid and ServerPid are the process IDs of the hub controller and the server (0 when not running).
func (f *System) ControllerPid() int { return pid(f.controller) }

// ServerMetrics returns the URL of the first server instance's metrics and the client that reads them.
func (f *System) ServerMetrics() (string, *http.Client) {
	return "https://" + f.Server.HTTP + "/metrics", f.serverClient.HTTPClient()
}

// ServerPid is the process ID of argocd-pull server.
func (f *System) ServerPid() int {
	if len(f.servers) == 0 {
		return 0
	}
	return pid(f.servers[0].proc)
}

func pid(p *loopback.Process) int {
	if p == nil || !p.Running() {
		return 0
	}
	return p.Pid()
}

// KeepDir keeps the fleet's directory when it stops (its logs, for a failed test or the demo).
func (f *System) KeepDir() { f.Env.KeepDir() }

func waitHTTP(ctx context.Context, p *loopback.Process, client *http.Client, url string) error {
	return p.WaitReady(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
