package workclient

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"
	"sigs.k8s.io/yaml"
)

// The gRPC keepalive of argocd-pull's CloudEvents clients (the controller's transport, the agent, the
// simulator) whose gRPC config sets none: while a call or a subscription is open, a ping after KeepAliveTime
// without any traffic, and the connection closed when nothing arrives within KeepAliveTimeout of the ping, so
// that the client connects again and resyncs. sdk-go leaves keepalive off by default, and a connection that a
// network fault left dead without a reset — a NAT or a load balancer that forgot the flow, a silent partition
// — then goes unnoticed for good: the subscription waits forever for events the server can no longer send,
// and publishes hang. The server's heartbeats on a subscription (every 10 s) are traffic, so a healthy
// subscription is never pinged. No ping is sent on a connection without calls (Maestro's server, like
// argocd-pull server with other settings, may refuse those).
//
// The values are sdk-go's own when its keepalive is turned on. A connection is given up after KeepAliveTime +
// KeepAliveTimeout (40 s) without traffic, so a hub that stalls for less (a saturated server, a collector's
// pause on either side) keeps its fleet connected. The 10 s and 5 s used until 2026-11 dropped half of a
// 150,000-Application fleet at once, four times in one run, where a connection went 15 s without traffic
// (docs/benchmarks.md); the price is a later notice of a silent partition.
const (
	KeepAliveTime    = 30 * time.Second
	KeepAliveTimeout = 10 * time.Second
)

// keepAliveKey is the gRPC config's keepalive section.
const keepAliveKey = "keepAliveConfig"

// DefaultKeepAlive turns the default keepalive on in options built from a gRPC config that sets no
// keepAliveConfig.
func DefaultKeepAlive(o *grpcoptions.GRPCOptions, cfg *grpcoptions.GRPCConfig) {
	if cfg.KeepAliveConfig != (grpcoptions.KeepAliveConfig{}) {
		return
	}
	o.Dialer.KeepAliveOptions = grpcoptions.KeepAliveOptions{Enable: true, Time: KeepAliveTime, Timeout: KeepAliveTimeout}
}

// KeepAliveConfigFile returns a gRPC config file with the default keepalive, for a client that reads the file
// itself (the OCM work agent): configFile when it sets keepAliveConfig, else a copy with it, written into dir.
// The copy names the same certificate, key and token files, so their rotation is taken up as before.
func KeepAliveConfigFile(configFile, dir string) (string, error) {
	b, err := os.ReadFile(configFile) //nolint:gosec // the user names the file
	if err != nil {
		return "", fmt.Errorf("read grpc config: %w", err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("read grpc config %s: %w", configFile, err)
	}
	if _, ok := cfg[keepAliveKey]; ok {
		return configFile, nil
	}
	cfg[keepAliveKey] = map[string]any{"enable": true, "time": KeepAliveTime.String(), "timeout": KeepAliveTimeout.String()}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("write grpc config with keepalive: %w", err)
	}
	path := filepath.Join(dir, "grpc-config-keepalive.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return "", fmt.Errorf("write grpc config with keepalive: %w", err)
	}
	return path, nil
}
