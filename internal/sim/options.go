package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Options are the flags of `argocd-pull sim`.
type Options struct {
	Transport          string
	GRPCConfig         string
	AgentTokenFile     string
	HubKubeconfig      string
	Clusters           int
	ClusterPrefix      string
	ClusterStart       int
	SyncDelay          time.Duration
	SyncJitter         float64
	InvalidRepo        string
	Churn              float64
	ResourcesPerApp    int
	MaxJSONRawLength   int32
	Workers            int
	ConnectParallelism int
	MetricsAddress     string
	KubeAPIQPS         float32
	KubeAPIBurst       int
	Seed               uint64
	Console            bool
	GCPercent          int

	invalidRepo *regexp.Regexp
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Transport:          workclient.TransportGRPC,
		Clusters:           10,
		ClusterPrefix:      "cluster",
		ClusterStart:       1,
		SyncDelay:          5 * time.Second,
		SyncJitter:         0.2,
		ResourcesPerApp:    2,
		Workers:            DefaultWorkers,
		ConnectParallelism: 32,
		MetricsAddress:     "127.0.0.1:9190",
		KubeAPIQPS:         500,
		KubeAPIBurst:       1000,
		Seed:               1,
		GCPercent:          DefaultGCPercent,
	}
}

// DefaultGCPercent is the simulator's GOGC. One process holds the clients of thousands of clusters, which on a
// real fleet run on as many machines; with Go's default (100) a fifth of its CPU at 3,000 clusters went to the
// garbage collector, taken from the hub it loads on the same machine. 400 trades memory (the heap grows to five
// times what is live instead of twice) for most of that CPU.
const DefaultGCPercent = 400

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Transport, "transport", o.Transport, "Where works come from: grpc (an argocd-pull or Maestro server) or kube (ManifestWorks on the hub)")
	fs.StringVar(&o.GRPCConfig, "grpc-config", o.GRPCConfig, "sdk-go gRPC client config of the server's agent endpoint: url, caFile, clientCertFile, clientKeyFile, token or tokenFile (transport grpc)")
	fs.StringVar(&o.AgentTokenFile, "agent-token-file", o.AgentTokenFile, "The server's token file (token,agent,<cluster> lines): each simulated cluster authenticates with its own agent token from it")
	fs.StringVar(&o.HubKubeconfig, "hub-kubeconfig", o.HubKubeconfig, "Kubeconfig of the hub (transport kube)")
	fs.IntVar(&o.Clusters, "clusters", o.Clusters, "Number of simulated managed clusters")
	fs.StringVar(&o.ClusterPrefix, "cluster-prefix", o.ClusterPrefix, "Names of the simulated clusters: this prefix followed by their index")
	fs.IntVar(&o.ClusterStart, "cluster-start", o.ClusterStart, "Index of the first simulated cluster (to split a fleet over several processes)")
	fs.DurationVar(&o.SyncDelay, "sync-delay", o.SyncDelay, "How long the simulated Argo CD takes to sync an Application (OutOfSync/Progressing, then Synced/Healthy)")
	fs.Float64Var(&o.SyncJitter, "sync-jitter", o.SyncJitter, "Spread of --sync-delay, as a fraction of it (0 to 1)")
	fs.StringVar(&o.InvalidRepo, "invalid-repo", o.InvalidRepo, "Regular expression of the repoURLs the simulated Argo CD cannot read (sync status Unknown, ComparisonError)")
	fs.Float64Var(&o.Churn, "churn", o.Churn, "Random health or sync status changes per second across the fleet")
	fs.IntVar(&o.ResourcesPerApp, "resources-per-app", o.ResourcesPerApp, "Resources each simulated Application reports in its status")
	fs.Int32Var(&o.MaxJSONRawLength, "max-json-raw-length", o.MaxJSONRawLength,
		fmt.Sprintf("Largest raw-JSON status feedback value (default %d for transport kube, the hub CRD's limit; %d for transport grpc)", workclient.KubeMaxJSONRawLength, workclient.GRPCMaxJSONRawLength))
	fs.IntVar(&o.Workers, "workers", o.Workers, "Works processed at once across the fleet")
	fs.IntVar(&o.ConnectParallelism, "connect-parallelism", o.ConnectParallelism, "Clusters connecting at once at start (transport grpc)")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "Address of /metrics, and of the controls a benchmark uses: POST /churn?perSecond=N, GET /events (the statuses sent, as JSON lines) (0 to disable)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the hub, for the whole fleet (transport kube)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the hub (transport kube)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "Seed of the churn's random choices")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "The garbage collector's target percentage (GOGC) for this process: memory traded for CPU; "+
		"the GOGC environment variable, when set, wins")
	fs.BoolVar(&o.Console, "console", o.Console, "Open each simulated cluster's console stream (grpc) and answer the hub console's "+
		"requests from the simulated Argo CD (trees, managed resources, live objects)")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	switch o.Transport {
	case workclient.TransportGRPC:
		if o.GRPCConfig == "" {
			errs = append(errs, errors.New("--grpc-config is required with --transport=grpc"))
		}
	case workclient.TransportKube:
		if o.HubKubeconfig == "" {
			errs = append(errs, errors.New("--hub-kubeconfig is required with --transport=kube"))
		}
	default:
		errs = append(errs, fmt.Errorf("--transport must be %q or %q, not %q", workclient.TransportGRPC, workclient.TransportKube, o.Transport))
	}
	if o.Clusters <= 0 {
		errs = append(errs, errors.New("--clusters must be positive"))
	}
	if o.ClusterPrefix == "" {
		errs = append(errs, errors.New("--cluster-prefix must not be empty"))
	}
	if o.SyncDelay < 0 {
		errs = append(errs, errors.New("--sync-delay must not be negative"))
	}
	if o.SyncJitter < 0 || o.SyncJitter > 1 {
		errs = append(errs, errors.New("--sync-jitter must be between 0 and 1"))
	}
	if o.Churn < 0 {
		errs = append(errs, errors.New("--churn must not be negative"))
	}
	if o.GCPercent <= 0 {
		errs = append(errs, errors.New("--gc-percent must be positive"))
	}
	if o.ResourcesPerApp < 0 {
		errs = append(errs, errors.New("--resources-per-app must not be negative"))
	}
	if o.MaxJSONRawLength < 0 {
		errs = append(errs, errors.New("--max-json-raw-length must not be negative"))
	}
	if o.Workers <= 0 || o.ConnectParallelism <= 0 {
		errs = append(errs, errors.New("--workers and --connect-parallelism must be positive"))
	}
	if o.InvalidRepo != "" {
		re, err := regexp.Compile(o.InvalidRepo)
		if err != nil {
			errs = append(errs, fmt.Errorf("--invalid-repo: %w", err))
		}
		o.invalidRepo = re
	}
	return errors.Join(errs...)
}

// Config returns the fleet configuration of the options: it reads the gRPC config or the hub kubeconfig.
func (o *Options) Config() (Config, error) {
	cfg := Config{
		Transport: o.Transport,
		Clusters:  ClusterNames(o.ClusterPrefix, o.ClusterStart, o.Clusters),
		Argo: ArgoConfig{SyncDelay: o.SyncDelay, SyncJitter: o.SyncJitter, InvalidRepo: o.invalidRepo,
			ResourcesPerApp: o.ResourcesPerApp},
		Churn:              o.Churn,
		MaxJSONRawLength:   o.MaxJSONRawLength,
		Workers:            o.Workers,
		ConnectParallelism: o.ConnectParallelism,
		Seed:               o.Seed,
		Console:            o.Console,
	}
	switch o.Transport {
	case workclient.TransportGRPC:
		g, err := grpcoptions.BuildGRPCOptionsFromFlags(o.GRPCConfig)
		if err != nil {
			return cfg, fmt.Errorf("read grpc config %s: %w", o.GRPCConfig, err)
		}
		c, err := grpcoptions.LoadConfig(o.GRPCConfig)
		if err != nil {
			return cfg, fmt.Errorf("read grpc config %s: %w", o.GRPCConfig, err)
		}
		workclient.DefaultKeepAlive(g, c)
		cfg.GRPC = g
		if o.AgentTokenFile != "" {
			if cfg.ClusterTokens, err = readAgentTokens(o.AgentTokenFile); err != nil {
				return cfg, err
			}
			if err := tokenTLS(g, c, o.GRPCConfig); err != nil {
				return cfg, err
			}
		}
	case workclient.TransportKube:
		hub, err := clientcmd.BuildConfigFromFlags("", o.HubKubeconfig)
		if err != nil {
			return cfg, fmt.Errorf("load hub kubeconfig %s: %w", o.HubKubeconfig, err)
		}
		hub.QPS, hub.Burst = o.KubeAPIQPS, o.KubeAPIBurst
		cfg.Hub = hub
	}
	return cfg, nil
}

// Run runs the simulated fleet until ctx ends.
func (o *Options) Run(ctx context.Context) error {
	reconnect.Install()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.GCPercent)
	}
	logger := klog.FromContext(ctx).WithName("sim")
	ctx = klog.NewContext(ctx, logger)
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	feed := newEventFeed()
	cfg.Hooks.StatusSent = feed.publish
	f, err := NewFleet(cfg)
	if err != nil {
		return err
	}
	if o.MetricsAddress != "" && o.MetricsAddress != "0" {
		addr, stop, err := serveMetrics(ctx, o.MetricsAddress, f.Registry(), controlHandlers(f, feed))
		if err != nil {
			return err
		}
		defer stop()
		logger.Info("Serving metrics", "address", addr)
	}
	logger.Info("Starting the simulated fleet", "clusters", o.Clusters, "transport", o.Transport,
		"syncDelay", o.SyncDelay, "churn", o.Churn)
	if err := f.Start(ctx); err != nil {
		return err
	}
	defer f.Stop()
	report := time.NewTicker(30 * time.Second)
	defer report.Stop()
	for {
		select {
		case <-ctx.Done():
			logger.Info("Stopping the simulated fleet", "stats", fmt.Sprintf("%+v", f.Stats()))
			return nil
		case <-report.C:
			s := f.Stats()
			logger.Info("Fleet", "connected", s.Connected, "works", s.Works, "applications", s.Applications,
				"syncedHealthy", s.SyncedHealthy, "statusUpdates", s.StatusUpdates, "deletions", s.Deletions, "errors", s.Errors)
		}
	}
}

// tokenTLS sets up TLS with the gRPC config's CA when the config itself has no token or client certificate:
// sdk-go turns TLS on only for those, and the agent tokens, sent per cluster, are only sent over TLS.
func tokenTLS(g *grpcoptions.GRPCOptions, c *grpcoptions.GRPCConfig, configFile string) error {
	if g.Dialer.TLSConfig != nil {
		return nil
	}
	if len(c.CAData) == 0 {
		return fmt.Errorf("--agent-token-file needs caFile in %s: bearer tokens are only sent over TLS", configFile)
	}
	tlsConfig, err := restapi.TLS{CAData: c.CAData}.Config()
	if err != nil {
		return fmt.Errorf("grpc config %s: %w", configFile, err)
	}
	g.Dialer.TLSConfig = tlsConfig
	return nil
}

// readAgentTokens reads the agent tokens of a server token file (token,kind[,name] lines, # comments): the
// token of each cluster's agent by cluster name.
func readAgentTokens(path string) (map[string]string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the user names the file
	if err != nil {
		return nil, fmt.Errorf("read agent token file: %w", err)
	}
	tokens := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Split(strings.TrimSpace(line), ",")
		if len(fields) == 3 && strings.TrimSpace(fields[1]) == "agent" {
			tokens[strings.TrimSpace(fields[2])] = strings.TrimSpace(fields[0])
		}
	}
	return tokens, nil
}
