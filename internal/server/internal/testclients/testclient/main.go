// Command testclient runs one of the server tests' clients in a process of its own, built without the race
// detector, and serves its controls over HTTP on loopback: an sdk-go agent client (-mode=agent) or the hub
// controller's grpc transport (-mode=source). The server's tests start it for clients that reconnect.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/server/internal/testclients"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run() error {
	mode := flag.String("mode", "", "agent or source")
	config := flag.String("grpc-config", "", "sdk-go gRPC client config file (url: host:port)")
	cluster := flag.String("cluster", "", "cluster name of the agent")
	sourceID := flag.String("source-id", "", "source ID of the source")
	restURL := flag.String("rest-url", "", "the server's REST API, for the source's list at start")
	addrFile := flag.String("addr-file", "", "file the control address is written to once it is served")
	reconnect := flag.Duration("reconnect-delay", 300*time.Millisecond, "delay before the client reconnects")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	clients.DelayFn = func() time.Duration { return *reconnect }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var handler http.Handler
	switch *mode {
	case "agent":
		opts, err := grpcoptions.BuildGRPCOptionsFromFlags(*config)
		if err != nil {
			return fmt.Errorf("load grpc config %s: %w", *config, err)
		}
		a, err := testclients.StartAgent(ctx, opts, *cluster)
		if err != nil {
			return err
		}
		handler = testclients.AgentHandler(a)
	case "source":
		s, err := testclients.StartSource(ctx, workclient.GRPCOptions{ConfigFile: *config, RESTURL: *restURL,
			SourceID: *sourceID, PublishQPS: 1000, PublishBurst: 1000, PageSize: 100})
		if err != nil {
			return err
		}
		handler = testclients.SourceHandler(s)
	default:
		return fmt.Errorf("unknown mode %q", *mode)
	}
	return serve(ctx, handler, *addrFile)
}

// serve serves the controls on a loopback port until ctx ends; the port goes to addrFile.
func serve(ctx context.Context, handler http.Handler, addrFile string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	// Written aside and renamed, so that a reader never sees half an address.
	if err := os.WriteFile(addrFile+".tmp", []byte(l.Addr().String()), 0o600); err != nil {
		return fmt.Errorf("write the control address: %w", err)
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		return fmt.Errorf("write the control address: %w", err)
	}
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
