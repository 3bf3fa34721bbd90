package localfleet

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/sim"
)

// serverInstance is one instance of argocd-pull server.
type serverInstance struct {
	Endpoints
	name string
	args []string
	proc *loopback.Process
}

// serverName names the i-th instance (from 0) in logs and components.
func serverName(i int) string {
	if i == 0 {
		return "argocd-pull-server"
	}
	return fmt.Sprintf("argocd-pull-server-%d", i+1)
}

// Simulator describes the simulated managed clusters of a fleet that also has real ones.
type Simulator struct {
	// Clusters is how many, named Prefix1 … PrefixN. They are spread over one argocd-pull sim process per
	// server instance, each connected to its instance, each cluster with an agent token of its own.
	Clusters int
	// Prefix starts their names ("sim" when empty).
	Prefix string
	// Args are extra flags of the sim processes (--sync-delay, --workers…).
	Args []string
}

func (s *Simulator) prefix() string {
	if s.Prefix == "" {
		return "sim"
	}
	return s.Prefix
}

func (s *Simulator) names() []string { return sim.ClusterNames(s.prefix(), 1, s.Clusters) }

// simulatorProcess is one argocd-pull sim process.
type simulatorProcess struct {
	name    string
	args    []string
	metrics string
	proc    *loopback.Process
}

// simulatedClusters are the clusters no real agent serves.
func (f *System) simulatedClusters() []string {
	switch {
	case f.Simulated:
		return f.Clusters
	case f.Simulator != nil:
		return f.Simulator.names()
	}
	return nil
}

// startSimulators starts a sim process per server instance, each with an even share of the simulated clusters.
func (f *System) startSimulators(ctx context.Context) error {
	if f.Simulator == nil || f.Simulator.Clusters == 0 {
		return nil
	}
	n := min(len(f.servers), f.Simulator.Clusters)
	f.progress("starting %d simulated clusters in %d argocd-pull sim process(es)", f.Simulator.Clusters, n)
	start := 1
	for i := range n {
		count := f.Simulator.Clusters/n + map[bool]int{true: 1}[i < f.Simulator.Clusters%n]
		cfg := filepath.Join(f.Dir, "pki", fmt.Sprintf("simulator-%d-grpc.yaml", i+1))
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("url: %s\ncaFile: %s\n", f.agentURL(i), f.ca.CertFile)), 0o600); err != nil {
			return fmt.Errorf("write simulator grpc config: %w", err)
		}
		port, err := loopback.FreePort()
		if err != nil {
			return err
		}
		s := &simulatorProcess{name: fmt.Sprintf("simulator-%d", i+1), metrics: addr(port)}
		s.args = append([]string{"sim", "--grpc-config", cfg, "--agent-token-file", f.TokenFile(),
			"--clusters", strconv.Itoa(count), "--cluster-prefix", f.Simulator.prefix(), "--cluster-start", strconv.Itoa(start),
			"--metrics-address", s.metrics}, f.Simulator.Args...)
		start += count
		f.simulators = append(f.simulators, s)
		if err := f.runSimulator(s); err != nil {
			return err
		}
		if err := waitHTTP(ctx, s.proc, http.DefaultClient, "http://"+s.metrics+"/healthz"); err != nil {
			return err
		}
	}
	return nil
}

func (f *System) runSimulator(s *simulatorProcess) error {
	p, err := f.run(s.name, s.args...)
	if err != nil {
		return err
	}
	s.proc = p
	f.watchExit(p)
	return nil
}

// SimulatorAddresses are the metrics addresses of the sim processes: /metrics, /healthz and /applications.
func (f *System) SimulatorAddresses() []string {
	out := make([]string, len(f.simulators))
	for i, s := range f.simulators {
		out[i] = s.metrics
	}
	return out
}

// ClientCertificate issues a client certificate of the fleet's CA for an identity of the server
// (agent:<cluster>, source:<id>, admin) and returns its files (Maestro mode).
func (f *System) ClientCertificate(identity string) (certFile, keyFile string, err error) {
	return f.ca.Issue(identity, false)
}

// agentURL is the server address the i-th agent (or sim process) connects to: the agents are spread over
// the instances in turn; with NetworkFaults, through the instance's agent relay.
func (f *System) agentURL(i int) string {
	n := max(i, 0) % len(f.servers)
	if rs := f.relays[ComponentNetworkAgents]; len(rs) > 0 {
		return rs[n].Addr
	}
	return f.servers[n].Agent
}

// controllerServer is where the controller connects: the last instance, through relays with NetworkFaults.
func (f *System) controllerServer() Endpoints {
	if rs := f.relays[ComponentNetworkController]; len(rs) == 2 {
		return Endpoints{Source: rs[0].Addr, HTTP: rs[1].Addr}
	}
	return f.servers[len(f.servers)-1].Endpoints
}

// relayDatabase returns the database URL the servers use: through a relay with NetworkFaults.
func (f *System) relayDatabase(db string) (string, error) {
	if !f.NetworkFaults {
		return db, nil
	}
	u, err := url.Parse(db)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	r, err := loopback.StartRelay(u.Host)
	if err != nil {
		return "", err
	}
	f.relays[ComponentNetworkPostgres] = []*loopback.Relay{r}
	u.Host = r.Addr
	return u.String(), nil
}

// relayServers puts relays before the servers' agent endpoints and the controller's server, with NetworkFaults.
func (f *System) relayServers() error {
	if !f.NetworkFaults {
		return nil
	}
	relay := func(component, target string) error {
		r, err := loopback.StartRelay(target)
		if err != nil {
			return err
		}
		f.relays[component] = append(f.relays[component], r)
		return nil
	}
	for _, s := range f.servers {
		if err := relay(ComponentNetworkAgents, s.Agent); err != nil {
			return err
		}
	}
	last := f.servers[len(f.servers)-1]
	if err := relay(ComponentNetworkController, last.Source); err != nil {
		return err
	}
	return relay(ComponentNetworkController, last.HTTP)
}

func (f *System) runServer(s *serverInstance) error {
	p, err := f.runWith(s.name, f.ServerEnv, s.args...)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

func (f *System) waitServer(ctx context.Context, s *serverInstance) error {
	return waitHTTP(ctx, s.proc, f.serverClient.HTTPClient(), "https://"+s.HTTP+"/readyz")
}

// restartProcess stops a process gracefully if it still runs (a Restart without a Kill) and starts it again.
func restartProcess(p *loopback.Process, start func() error) error {
	if p != nil {
		p.Stop(10 * time.Second)
	}
	return start()
}
