package localfleet

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Components a fault can hit: the hub controller, an instance of argocd-pull server, PostgreSQL, the agent of
// a managed cluster ("agent/<cluster>"), a simulator process ("simulator/<n>"), or, with NetworkFaults, a
// network link.
const (
	ComponentController = "controller"
	// ComponentServer is the first instance of argocd-pull server; ComponentServerInstance names the others.
	ComponentServer   = "server"
	ComponentPostgres = "postgres"
	// ComponentNetworkAgents is the link of every agent and simulator to the server instances; Kill cuts it
	// (connections reset, new ones refused), Restart restores it.
	ComponentNetworkAgents = "network/agents"
	// ComponentNetworkController is the link of the controller to its server instance (gRPC and REST).
	ComponentNetworkController = "network/controller"
	// ComponentNetworkPostgres is the link of every server instance to PostgreSQL.
	ComponentNetworkPostgres = "network/postgres"
	componentAgent           = "agent/"
	componentSimulator       = "simulator/"
)

// ComponentAgent names the agent of a managed cluster.
func ComponentAgent(cluster string) string { return componentAgent + cluster }

// ComponentServerInstance names the n-th instance of argocd-pull server, from 1.
func ComponentServerInstance(n int) string {
	if n == 1 {
		return ComponentServer
	}
	return ComponentServer + "/" + strconv.Itoa(n)
}

// ComponentSimulator names the n-th simulator process, from 1.
func ComponentSimulator(n int) string { return componentSimulator + strconv.Itoa(n) }

// Kill kills a component at once (SIGKILL), as a crash would; a network link is cut.
func (f *System) Kill(component string) error {
	if rs, ok := f.relays[component]; ok {
		for _, r := range rs {
			r.Cut()
		}
		return nil
	}
	switch {
	case component == ComponentController:
		f.expectExit(f.controller)
		f.controller.Kill()
	case f.serverInstance(component) != nil:
		f.expectExit(f.serverInstance(component).proc)
		f.serverInstance(component).proc.Kill()
	case component == ComponentPostgres && f.Env.Postgres != nil:
		f.Env.Postgres.Kill()
	case f.simulator(component) != nil:
		f.simulator(component).proc.Kill()
	case strings.HasPrefix(component, componentAgent) && f.agents[strings.TrimPrefix(component, componentAgent)] != nil:
		f.agents[strings.TrimPrefix(component, componentAgent)].Kill()
	default:
		return fmt.Errorf("no component %q in this fleet", component)
	}
	return nil
}

// Shutdown stops a component gracefully, as an operator's restart would: SIGTERM, and PostgreSQL's fast
// shutdown (every session ended, a checkpoint). A network link is cut as by Kill.
func (f *System) Shutdown(component string) error {
	grace := 30 * time.Second
	switch {
	case f.relays[component] != nil:
		return f.Kill(component)
	case component == ComponentController:
		f.expectExit(f.controller)
		f.controller.Stop(grace)
	case f.serverInstance(component) != nil:
		f.expectExit(f.serverInstance(component).proc)
		f.serverInstance(component).proc.Stop(grace)
	case component == ComponentPostgres && f.Env.Postgres != nil:
		f.Env.Postgres.Shutdown()
	case f.simulator(component) != nil:
		f.simulator(component).proc.Stop(grace)
	case strings.HasPrefix(component, componentAgent) && f.agents[strings.TrimPrefix(component, componentAgent)] != nil:
		f.agents[strings.TrimPrefix(component, componentAgent)].Stop(grace)
	default:
		return fmt.Errorf("no component %q in this fleet", component)
	}
	return nil
}

// Partition drops the traffic of a network link silently (NetworkFaults): the connections it carries now are
// lost for good and neither end is told, new ones get no answer, until Restart restores the link.
func (f *System) Partition(component string) error {
	rs, ok := f.relays[component]
	if !ok {
		return fmt.Errorf("no network link %q in this fleet", component)
	}
	for _, r := range rs {
		r.Partition()
	}
	return nil
}

// Restart starts a component again with its configuration: the same addresses, credentials and data; a
// network link is restored. It does not wait for the component to be ready, since that may depend on another
// that is still down; WaitReady does.
func (f *System) Restart(ctx context.Context, component string) error {
	if rs, ok := f.relays[component]; ok {
		for _, r := range rs {
			r.Restore()
		}
		return nil
	}
	switch {
	case component == ComponentController:
		return f.startControllerProcess()
	case f.serverInstance(component) != nil:
		s := f.serverInstance(component)
		f.expectExit(s.proc)
		return restartProcess(s.proc, func() error { return f.runServer(s) })
	case component == ComponentPostgres && f.Env.Postgres != nil:
		return f.Env.Postgres.Start(ctx)
	case f.simulator(component) != nil:
		s := f.simulator(component)
		return restartProcess(s.proc, func() error { return f.runSimulator(s) })
	case strings.HasPrefix(component, componentAgent):
		return f.StartAgent(ctx, strings.TrimPrefix(component, componentAgent))
	}
	return fmt.Errorf("no component %q in this fleet", component)
}

// WaitReady waits until a component says it is ready: the controller and the server on /readyz, which they
// answer only when what they depend on is up.
func (f *System) WaitReady(ctx context.Context, component string) error {
	switch {
	case component == ComponentController:
		return f.waitController(ctx)
	case f.serverInstance(component) != nil:
		return f.waitServer(ctx, f.serverInstance(component))
	case f.simulator(component) != nil:
		s := f.simulator(component)
		return waitHTTP(ctx, s.proc, http.DefaultClient, "http://"+s.metrics+"/healthz")
	case f.relays[component] != nil, component == ComponentPostgres && f.Env.Postgres != nil, strings.HasPrefix(component, componentAgent):
		return nil // Restart waited for them: PostgreSQL to take connections, an agent to answer /healthz.
	}
	return fmt.Errorf("no component %q in this fleet", component)
}

// serverInstance returns the instance a component names, or nil.
func (f *System) serverInstance(component string) *serverInstance {
	for i, s := range f.servers {
		if component == ComponentServerInstance(i+1) {
			return s
		}
	}
	return nil
}

// simulator returns the sim process a component names, or nil.
func (f *System) simulator(component string) *simulatorProcess {
	for i, s := range f.simulators {
		if component == ComponentSimulator(i+1) {
			return s
		}
	}
	return nil
}

func (f *System) waitController(ctx context.Context) error {
	return waitHTTP(ctx, f.controller, http.DefaultClient, "http://"+f.controllerHealth+"/readyz")
}
