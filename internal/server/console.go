package server

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// setUpConsole builds the console's doors and binds their listeners, when the options open them.
func (s *Server) setUpConsole() error {
	if !s.opts.Console.Enabled() {
		return nil
	}
	doors, err := s.opts.Console.Build()
	if err != nil {
		return err
	}
	s.console = doors
	// Several instances share the database: a cluster's stream may be on another one.
	doors.Hub.UseRelay(s.store, s.opts.InstanceID, s.opts.InstanceTimeout)
	s.metrics.registry.MustRegister(doors.Hub.Collectors()...)
	for i, addr := range []string{s.opts.Console.RedisAddress, s.opts.Console.ProxyAddress} {
		if addr == "" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		s.consoleListeners[i] = l
	}
	return nil
}

// serveConsole serves an agent's console stream: the agent's cluster is its credential's.
func (s *Server) serveConsole(stream grpc.ServerStream) error {
	id := identityFrom(stream.Context())
	cluster := id.Name
	if id.Kind == kindAnonymous {
		if md, ok := metadata.FromIncomingContext(stream.Context()); ok && len(md.Get(consoleapi.ClusterHeader)) > 0 {
			cluster = md.Get(consoleapi.ClusterHeader)[0]
		}
	}
	if cluster == "" || !id.mayActAsAgent(cluster) {
		return status.Errorf(codes.PermissionDenied, "%s may not open a console stream", id)
	}
	return s.console.Hub.Serve(stream, cluster)
}

// serveConsoleDoors serves the redis proxy and the managed clusters' API proxy.
func (s *Server) serveConsoleDoors(ctx context.Context) {
	if s.console == nil {
		return
	}
	logger := klog.FromContext(ctx)
	s.background(ctx, func(ctx context.Context) { _ = s.console.Hub.RunRelay(ctx) })
	if l := s.consoleListeners[0]; l != nil {
		s.serve(func() error { return s.console.Redis.Serve(ctx, l) })
		logger.Info("Console redis proxy listening", "address", l.Addr().String(), "upstream", s.opts.Console.RedisUpstream)
	}
	if l := s.consoleListeners[1]; l != nil {
		s.serve(func() error { return s.console.Kube.Serve(ctx, l) })
		logger.Info("Console proxy to the managed clusters' API listening", "address", l.Addr().String())
	}
}

// ConsoleRedisAddr is the address of the console's redis proxy, or "" when it is off.
func (s *Server) ConsoleRedisAddr() string { return addrOf(s.consoleListeners[0]) }

// ConsoleProxyAddr is the address of the console's proxy to the managed clusters' API, or "" when it is off.
func (s *Server) ConsoleProxyAddr() string { return addrOf(s.consoleListeners[1]) }

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}
