// Package server is argocd-pull's Maestro-compatible CloudEvents server: sources (the hub controller) and
// agents (managed clusters) speak sdk-go's CloudEventService over gRPC on two listeners, works are kept in
// PostgreSQL, instances sharing a database tell each other about changes with LISTEN/NOTIFY, and an HTTP
// listener serves a Maestro-compatible REST API, metrics and health. It keeps no state
// that another instance needs outside PostgreSQL (package store), and it never dials an agent: agents dial it.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpccredentials "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"

	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// Server is one running server instance. Start it, read its addresses, Stop it.
type Server struct {
	opts     *Options
	limits   sizeLimits
	store    store.Store
	metrics  *metrics
	streams  *streams
	dispatch *dispatcher
	specs    *batcher[store.SpecWrite, store.SpecResult]
	statuses *batcher[store.StatusWrite, store.StatusResult]
	auth     *authenticator
	creds    *credentialFiles

	sourceGRPC *grpc.Server
	agentGRPC  *grpc.Server
	http       *http.Server
	listeners  [3]net.Listener
	// agentConns is the agent endpoint's listener (listeners[1]), which can close an agent's connection.
	agentConns *connListener

	// console is the hub console's doors, when its options open them; consoleListeners are their listeners
	// (redis proxy, managed clusters' API proxy), nil when off.
	console          *console.Doors
	consoleListeners [2]net.Listener

	// openStore opens the store; tests replace it to inject failures.
	openStore func(ctx context.Context, cfg store.Config) (store.Store, error)

	ready atomic.Bool
	// waiting is why a starting server is not ready yet: the database's last error.
	waiting   atomic.Pointer[error]
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
	serveErrs chan error
}

// New returns a server for validated options.
func New(opts *Options) *Server {
	return &Server{
		opts:      opts,
		limits:    sizeLimits{event: opts.MaxEventBytes, resync: opts.MaxResyncBytes},
		metrics:   newMetrics(),
		streams:   newStreams(),
		serveErrs: make(chan error, 3),
		openStore: store.New,
	}
}

// Start binds the three listeners, serves health on the HTTP one, waits for the database (as long as ctx
// lasts: a server may start before its database), applies migrations and starts serving.
func (s *Server) Start(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}

func (s *Server) start(startCtx context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(startCtx))
	s.cancel = cancel
	logger := klog.FromContext(ctx).WithValues("instance", s.opts.InstanceID)
	ctx = klog.NewContext(ctx, logger)
	st, err := s.openStore(ctx, store.Config{URL: s.opts.DatabaseURL, MaxConns: s.opts.DatabaseMaxConns,
		InstanceID: s.opts.InstanceID, Observe: s.metrics.observeDB})
	if err != nil {
		return err
	}
	s.store = st
	tlsConfig, err := s.setUpAuth()
	if err != nil {
		return err
	}
	if err := s.listen(); err != nil {
		return err
	}
	if err := s.setUpConsole(); err != nil {
		return err
	}
	s.background(ctx, func(ctx context.Context) { s.creds.watch(ctx, s.opts.CredentialsReloadInterval) })
	s.serveHTTP(ctx, tlsConfig)
	if err := s.servePprof(ctx); err != nil {
		return err
	}
	// Waiting stops with the caller's context too: a server told to stop while its database is away.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		select {
		case <-startCtx.Done():
			stopWaiting()
		case <-waitCtx.Done():
		}
	}()
	if err := s.prepareDatabase(klog.NewContext(waitCtx, logger)); err != nil {
		return err
	}
	if err := s.startServing(ctx, waitCtx, tlsConfig); err != nil {
		return err
	}
	s.ready.Store(true)
	logger.Info("Server started", "sourceAddress", s.SourceAddr(), "agentAddress", s.AgentAddr(), "httpAddress", s.HTTPAddr(),
		"tls", tlsConfig != nil, "mtls", s.opts.ClientCAFile != "", "tokens", len(*s.creds.tokens.Load()), "anonymous", s.auth.anonymous)
	return nil
}

// setUpAuth reads the credential files and returns the listeners' TLS configuration, or nil to serve in
// plain text.
func (s *Server) setUpAuth() (*tls.Config, error) {
	creds := newCredentials(s.opts)
	if _, err := creds.load(); err != nil {
		return nil, err
	}
	s.creds = creds
	s.auth = &authenticator{creds: creds, anonymous: s.opts.AllowAnonymous}
	if s.opts.TLSCertFile == "" {
		return nil, nil
	}
	return creds.serving(), nil
}

func (s *Server) listen() error {
	for i, addr := range []string{s.opts.SourceAddress, s.opts.AgentAddress, s.opts.HTTPAddress} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		s.listeners[i] = l
	}
	s.agentConns = newConnListener(s.listeners[1])
	s.listeners[1] = s.agentConns
	return nil
}

// databaseBackoff spaces the attempts to reach the database at a start.
var databaseBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 4 * time.Second}

// prepareDatabase applies the migrations and registers the instance, again and again until the database
// answers or ctx ends. It logs what it waits for when that changes, not at every attempt.
func (s *Server) prepareDatabase(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	backoff := databaseBackoff
	start := time.Now()
	logged := ""
	for {
		err := s.store.Migrate(ctx)
		if err == nil {
			err = s.store.RegisterInstance(ctx)
		}
		if err == nil {
			s.waiting.Store(nil)
			if logged != "" {
				logger.Info("The database is reachable", "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("wait for the database: %w", err)
		}
		s.waiting.Store(&err)
		if err.Error() != logged {
			logged = err.Error()
			logger.Info("Waiting for the database; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the database: %w", err)
		case <-time.After(backoff.Step()):
		}
	}
}

// serveHTTP serves the REST API, metrics and health. Until the server is ready, /readyz says what it waits
// for and the REST API answers 503.
func (s *Server) serveHTTP(ctx context.Context, tlsConfig *tls.Config) {
	if tlsConfig != nil {
		// net/http writes its protocols into the config it serves while the gRPC servers clone theirs from it.
		tlsConfig = tlsConfig.Clone()
	}
	s.http = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	s.serve(func() error {
		if tlsConfig != nil {
			return s.http.ServeTLS(s.listeners[2], "", "")
		}
		return s.http.Serve(s.listeners[2])
	})
}

func (s *Server) startServing(ctx, waitCtx context.Context, tlsConfig *tls.Config) error {
	s.dispatch = newDispatcher(s.streams, s.metrics, 8, s.opts.SourceSendTimeout, s.opts.AgentSendTimeout)
	s.dispatch.run(ctx)
	s.specs = newBatcher(500, 30*time.Second, s.opts.StoreBatchWait, func(ctx context.Context, in []store.SpecWrite) ([]store.SpecResult, error) {
		return s.store.ApplySpecs(ctx, in, s.opts.AutoRegisterConsumers)
	})
	s.specs.run(ctx, 2)
	s.statuses = newBatcher(500, 30*time.Second, s.opts.StoreBatchWait, s.store.ApplyStatuses)
	s.statuses.run(ctx, 2)

	// Nothing is served before the feed listens: a change another instance commits after a client
	// subscribed here must reach it.
	listening := make(chan struct{})
	s.background(ctx, func(ctx context.Context) {
		_ = s.store.Listen(ctx, s.feedConnected(listening), func(ctx context.Context, n []store.Notification) {
			s.dispatch.notifications(ctx, s.store, n)
		})
	})
	select {
	case <-listening:
	case <-waitCtx.Done():
		return errors.New("stopped before the database notification feed connected")
	}

	s.sourceGRPC = s.grpcServer(ctx, tlsConfig, KindSource)
	pbv1.RegisterCloudEventServiceServer(s.sourceGRPC, &sourceEndpoint{s: s})
	s.agentGRPC = s.grpcServer(ctx, tlsConfig, KindAgent)
	pbv1.RegisterCloudEventServiceServer(s.agentGRPC, &agentEndpoint{s: s, service: &agentService{s: s}})

	if s.console != nil {
		consoleapi.Register(s.agentGRPC, s.serveConsole)
	}

	s.serve(func() error { return s.sourceGRPC.Serve(s.listeners[0]) })
	s.serve(func() error { return s.agentGRPC.Serve(s.listeners[1]) })
	s.serveConsoleDoors(ctx)
	s.background(ctx, s.maintain)
	return nil
}

// grpcServer is the gRPC server of the endpoint of a role (KindSource or KindAgent).
func (s *Server) grpcServer(ctx context.Context, tlsConfig *tls.Config, role string) *grpc.Server {
	creds := insecure.NewCredentials()
	var readBuffer grpc.ServerOption = grpc.EmptyServerOption{}
	if tlsConfig != nil {
		// TLS reads a whole record and keeps it decrypted: gRPC's own read buffer on top of it (32 KiB per
		// connection for as long as it is open, most of the server's heap with thousands of agents) would only
		// copy it again.
		creds, readBuffer = grpccredentials.NewTLS(tlsConfig), grpc.ReadBufferSize(0)
	}
	return grpc.NewServer(
		grpc.Creds(creds),
		readBuffer,
		// The transport admits resync requests; each event is checked against its own limit.
		grpc.MaxRecvMsgSize(s.opts.MaxResyncBytes+64*1024),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.ChainUnaryInterceptor(s.auth.unaryInterceptor(role), loggingUnary(ctx)),
		grpc.ChainStreamInterceptor(s.auth.streamInterceptor(role), loggingStream(ctx)),
	)
}

// loggingUnary and loggingStream give handlers the server's logger in their context.
func loggingUnary(base context.Context) grpc.UnaryServerInterceptor {
	logger := klog.FromContext(base)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(klog.NewContext(ctx, logger), req)
	}
}

func loggingStream(base context.Context) grpc.StreamServerInterceptor {
	logger := klog.FromContext(base)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &contextStream{ServerStream: ss, ctx: klog.NewContext(ss.Context(), logger)})
	}
}

func (s *Server) serve(fn func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			s.serveErrs <- err
		}
	}()
}

func (s *Server) background(ctx context.Context, fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(ctx)
	}()
}

// feedConnected returns the hook the notification feed calls on every connection. The first closes
// listening. After a later one, the feed was interrupted and notifications may be lost, so every
// subscription is reset and its client resyncs.
func (s *Server) feedConnected(listening chan<- struct{}) func(ctx context.Context) {
	first := true
	return func(ctx context.Context) {
		if first {
			first = false
			close(listening)
			return
		}
		n := s.streams.resetAll(errFeedInterrupted)
		s.metrics.streamResets.Inc()
		klog.FromContext(ctx).Info("Database feed reconnected; reset subscriptions so that clients resync", "subscriptions", n)
	}
}

// Errors returns a channel that receives an error when a listener fails.
func (s *Server) Errors() <-chan error { return s.serveErrs }

// SourceAddr is the address sources connect to.
func (s *Server) SourceAddr() string { return s.listeners[0].Addr().String() }

// AgentAddr is the address agents connect to.
func (s *Server) AgentAddr() string { return s.listeners[1].Addr().String() }

// HTTPAddr is the address of the REST API, metrics and health endpoints.
func (s *Server) HTTPAddr() string { return s.listeners[2].Addr().String() }

// Stop shuts the server down gracefully: it stops being ready, ends every subscription (clients resync on
// another instance), lets in-flight publishes finish, and leaves the instance table.
func (s *Server) Stop() {
	s.stopOnce.Do(s.stop)
}

func (s *Server) stop() {
	s.ready.Store(false)
	s.streams.resetAll(errShuttingDown)
	if s.console != nil {
		s.console.Hub.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	for _, g := range []*grpc.Server{s.sourceGRPC, s.agentGRPC} {
		if g != nil {
			gracefulStop(ctx, g)
		}
	}
	if s.http != nil {
		_ = s.http.Shutdown(ctx)
	}
	for _, l := range append(s.listeners[:], s.consoleListeners[:]...) {
		if l != nil {
			_ = l.Close()
		}
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.store != nil {
		if err := s.store.RemoveInstance(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to leave the instance table", "instance", s.opts.InstanceID)
		}
		s.store.Close()
	}
}

func gracefulStop(ctx context.Context, g *grpc.Server) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
	}
}
