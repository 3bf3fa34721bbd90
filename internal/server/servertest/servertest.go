// Package servertest starts argocd-pull server for the tests of the packages that talk to it (the hub's grpc
// transport, the simulator): on a database of its own in a PostgreSQL the test started, on loopback ports,
// anonymous callers allowed. It is imported by tests only. The server's own tests start it themselves (they
// cannot import this package, which imports theirs).
package servertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// Start runs a server on a new database until the test ends; configure, when given, changes its options
// first.
func Start(t testing.TB, pg *loopback.Postgres, configure ...func(*server.Options)) *server.Server {
	t.Helper()
	o := Options(NewDatabase(t, pg))
	for _, c := range configure {
		c(o)
	}
	return Run(t, o)
}

// NewDatabase creates a database of the test's own and returns its URL.
func NewDatabase(t testing.TB, pg *loopback.Postgres) string {
	t.Helper()
	db, err := pg.CreateDatabase(context.Background(), testutil.DatabaseName(t))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Options are the options of a test server on a database: loopback ports the kernel picks, anonymous callers
// allowed, a short shutdown.
func Options(db string) *server.Options {
	o := server.NewOptions()
	o.DatabaseURL = db
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.AllowAnonymous = true
	o.ShutdownTimeout = 5 * time.Second
	return o
}

// FreeAddresses returns a source, an agent and an HTTP address on loopback ports free now: for a server that
// must come back on the same addresses after a stop, or that clients are pointed at before it starts.
func FreeAddresses(t testing.TB) (source, agent, http string) {
	t.Helper()
	ports, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	at := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	return at(ports[0]), at(ports[1]), at(ports[2])
}

// Run starts a server with the options and stops it when the test ends.
func Run(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := server.New(o)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Client returns a client of the server's REST API.
func Client(t testing.TB, s *server.Server) *restapi.Client {
	t.Helper()
	c, err := restapi.New(restapi.Config{URL: "http://" + s.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
