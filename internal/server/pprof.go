package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiles on --pprof-bind-address, in plain HTTP, until the server stops; nothing
// when the flag is empty.
func (s *Server) servePprof(ctx context.Context) error {
	if s.opts.PprofAddress == "" {
		return nil
	}
	l, err := net.Listen("tcp", s.opts.PprofAddress)
	if err != nil {
		return fmt.Errorf("listen on %s for pprof: %w", s.opts.PprofAddress, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.serve(func() error { return srv.Serve(l) })
	s.background(ctx, func(ctx context.Context) {
		<-ctx.Done()
		_ = srv.Close()
	})
	return nil
}
