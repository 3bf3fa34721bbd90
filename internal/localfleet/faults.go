package localfleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Components a fault can hit: the hub controller, argocd-pull server, PostgreSQL, or the agent of a managed
// cluster ("agent/<cluster>").
const (
	ComponentController = "controller"
	ComponentServer     = "server"
	ComponentPostgres   = "postgres"
	componentAgent      = "agent/"
)

// ComponentAgent names the agent of a managed cluster.
func ComponentAgent(cluster string) string { return componentAgent + cluster }

// Kill kills a component at once (SIGKILL), as a crash would.
func (f *System) Kill(component string) error {
	switch {
	case component == ComponentController:
		f.controller.Kill()
	case component == ComponentServer && f.server != nil:
		f.server.Kill()
	case component == ComponentPostgres && f.Env.Postgres != nil:
		f.Env.Postgres.Kill()
	case strings.HasPrefix(component, componentAgent) && f.agents[strings.TrimPrefix(component, componentAgent)] != nil:
		f.agents[strings.TrimPrefix(component, componentAgent)].Kill()
	default:
		return fmt.Errorf("no component %q in this fleet", component)
	}
	return nil
}

// Restart starts a component again with its configuration: the same addresses, credentials and data. It does
// not wait for the component to be ready, since that may depend on another that is still down; WaitReady does.
func (f *System) Restart(ctx context.Context, component string) error {
	switch {
	case component == ComponentController:
		return f.startControllerProcess()
	case component == ComponentServer && f.server != nil:
		f.server.Stop(10 * time.Second)
		return f.runServer()
	case component == ComponentPostgres && f.Env.Postgres != nil:
		return f.Env.Postgres.Start(ctx)
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
	case component == ComponentServer && f.server != nil:
		return f.waitServer(ctx)
	case component == ComponentPostgres && f.Env.Postgres != nil, strings.HasPrefix(component, componentAgent):
		return nil // Restart waited for them: PostgreSQL to take connections, an agent to answer /healthz.
	}
	return fmt.Errorf("no component %q in this fleet", component)
}

func (f *System) runServer() error {
	p, err := f.run("argocd-pull-server", f.serverArgs...)
	if err != nil {
		return err
	}
	f.server = p
	return nil
}

func (f *System) waitServer(ctx context.Context) error {
	return waitHTTP(ctx, f.server, f.serverClient.HTTPClient(), "https://"+f.Server.HTTP+"/readyz")
}

func (f *System) waitController(ctx context.Context) error {
	return waitHTTP(ctx, f.controller, http.DefaultClient, "http://"+f.controllerHealth+"/readyz")
}
