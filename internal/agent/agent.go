// Package agent runs on a managed cluster (`argocd-pull agent`): the OCM work agent, used as a library, which
// pulls the cluster's works from the hub (driver kube) or from a Maestro-compatible server over CloudEvents
// gRPC (driver grpc), applies them to the cluster and reports their status with raw-JSON feedback. It holds the only credentials the
// cluster uses towards the hub (its own, for its own cluster) and dials out only; it never reads Secret data into a
// work's status.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/openshift/library-go/pkg/controller/controllercmd"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	ocmmanifests "open-cluster-management.io/ocm/manifests"
	commonoptions "open-cluster-management.io/ocm/pkg/common/options"
	"open-cluster-management.io/ocm/pkg/work/spoke"

	"github.com/argocd-pull/argocd-pull/internal/consoleagent"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

const appliedManifestWorkCRD = "klusterlet/managed/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml"

// Options are the flags of `argocd-pull agent`.
type Options struct {
	ClusterName        string
	Driver             string
	Kubeconfig         string
	HubKubeconfig      string
	GRPCConfig         string
	ClientID           string
	AgentID            string
	Namespace          string
	MaxJSONRawLength   int32
	StatusSyncInterval time.Duration
	HealthAddress      string
	InstallCRDs        bool
	KubeAPIQPS         float32
	KubeAPIBurst       int

	// ConsoleRedis is the cluster's Argo CD redis: set, the agent answers the hub console over its console
	// stream (package consoleagent).
	ConsoleRedis               string
	ConsoleRedisPasswordFile   string
	ConsoleRedisPasswordSecret string
	// ConsoleGRPCConfig is the gRPC config of the server's agent endpoint for the console stream; the work
	// agent's --grpc-config when empty (driver grpc).
	ConsoleGRPCConfig string
	// ArgoCDNamespace is where the cluster's Argo CD runs.
	ArgoCDNamespace string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Driver:             workclient.TransportKube,
		Namespace:          "open-cluster-management-agent",
		StatusSyncInterval: 10 * time.Second,
		HealthAddress:      "127.0.0.1:8443",
		InstallCRDs:        true,
		KubeAPIQPS:         50,
		KubeAPIBurst:       100,
		ArgoCDNamespace:    "argocd",
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "Name of this managed cluster (the hub namespace of its works, or its consumer name on the server)")
	fs.StringVar(&o.Driver, "driver", o.Driver, "Where works come from: kube (ManifestWorks on the hub) or grpc (a Maestro-compatible server)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of this managed cluster (in-cluster config or $KUBECONFIG when empty)")
	fs.StringVar(&o.HubKubeconfig, "hub-kubeconfig", o.HubKubeconfig, "Kubeconfig of the hub (driver kube)")
	fs.StringVar(&o.GRPCConfig, "grpc-config", o.GRPCConfig, "sdk-go gRPC client config file: url, caFile, clientCertFile, clientKeyFile, token or tokenFile (driver grpc)")
	fs.StringVar(&o.ClientID, "client-id", o.ClientID, "CloudEvents client ID (driver grpc; default <cluster-name>-work-agent)")
	fs.StringVar(&o.AgentID, "agent-id", o.AgentID, "ID of this agent, kept in the AppliedManifestWorks it writes on the cluster (default <cluster-name>-<driver>-agent, "+
		"so that a kube and a grpc agent can run side by side on one cluster during argocd-pull migrate)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the agent on the managed cluster")
	fs.Int32Var(&o.MaxJSONRawLength, "max-json-raw-length", o.MaxJSONRawLength,
		fmt.Sprintf("Largest raw-JSON status feedback value (default %d for driver kube, the hub CRD's limit; %d for driver grpc)", workclient.KubeMaxJSONRawLength, workclient.GRPCMaxJSONRawLength))
	fs.DurationVar(&o.StatusSyncInterval, "status-sync-interval", o.StatusSyncInterval, "How often status is read for manifests without watch-based feedback")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "Address of the /healthz endpoint (0 to disable)")
	fs.BoolVar(&o.InstallCRDs, "install-crds", o.InstallCRDs, "Create the AppliedManifestWork CRD on the managed cluster when it is missing")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the managed cluster's and the hub's apiserver")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the managed cluster's and the hub's apiserver")
	fs.StringVar(&o.ConsoleRedis, "console-redis-address", o.ConsoleRedis,
		"The cluster's Argo CD redis (host:port): set, the agent answers the hub's Argo CD console (resource trees, live state, events, logs of delivered Applications) over a stream it opens on argocd-pull server")
	fs.StringVar(&o.ConsoleRedisPasswordFile, "console-redis-password-file", o.ConsoleRedisPasswordFile, "File with the password of the cluster's Argo CD redis (the argocd-redis Secret's auth), if it has one")
	fs.StringVar(&o.ConsoleRedisPasswordSecret, "console-redis-password-secret", o.ConsoleRedisPasswordSecret,
		"namespace/name of the Secret on this cluster whose key auth is the password of its Argo CD redis (argocd/argocd-redis in Argo CD installs since 2.8), read at start")
	fs.StringVar(&o.ConsoleGRPCConfig, "console-grpc-config", o.ConsoleGRPCConfig,
		"sdk-go gRPC client config of argocd-pull server's agent endpoint for the console stream (default: --grpc-config)")
	fs.StringVar(&o.ArgoCDNamespace, "argocd-namespace", o.ArgoCDNamespace, "Namespace of the cluster's Argo CD")
}

// Validate checks the flags and fills in the defaults that depend on others.
func (o *Options) Validate() error {
	var errs []error
	if o.ClusterName == "" {
		errs = append(errs, errors.New("--cluster-name is required"))
	}
	switch o.Driver {
	case workclient.TransportKube:
		if o.HubKubeconfig == "" {
			errs = append(errs, errors.New("--hub-kubeconfig is required with --driver=kube"))
		}
	case workclient.TransportGRPC:
		if o.GRPCConfig == "" {
			errs = append(errs, errors.New("--grpc-config is required with --driver=grpc"))
		}
	default:
		errs = append(errs, fmt.Errorf("--driver must be %q or %q, not %q", workclient.TransportKube, workclient.TransportGRPC, o.Driver))
	}
	if o.MaxJSONRawLength < 0 {
		errs = append(errs, errors.New("--max-json-raw-length must not be negative"))
	}
	if o.MaxJSONRawLength == 0 {
		o.MaxJSONRawLength = workclient.MaxJSONRawLength(o.Driver)
	}
	if o.ClientID == "" {
		o.ClientID = o.ClusterName + "-work-agent"
	}
	if o.AgentID == "" {
		// Two agents of one cluster must not share an ID: each would take the other's AppliedManifestWorks for
		// its own stale ones and evict them (and what they applied) after the eviction grace period.
		o.AgentID = o.ClusterName + "-" + o.Driver + "-agent"
	}
	if o.ConsoleRedisPasswordFile != "" && o.ConsoleRedisPasswordSecret != "" {
		errs = append(errs, errors.New("--console-redis-password-file and --console-redis-password-secret exclude each other"))
	}
	if s := o.ConsoleRedisPasswordSecret; s != "" {
		if ns, name, ok := strings.Cut(s, "/"); !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Errorf("--console-redis-password-secret must be namespace/name, not %q", s))
		}
	}
	if o.ConsoleRedis != "" {
		if o.ConsoleGRPCConfig == "" && o.Driver == workclient.TransportGRPC {
			o.ConsoleGRPCConfig = o.GRPCConfig
		}
		if o.ConsoleGRPCConfig == "" {
			errs = append(errs, errors.New("--console-redis-address needs --console-grpc-config (argocd-pull server's agent endpoint) with --driver=kube"))
		}
	}
	return errors.Join(errs...)
}

// Run runs the work agent until the context ends.
func (o *Options) Run(ctx context.Context) error {
	reconnect.Install()
	logger := klog.FromContext(ctx).WithValues("cluster", o.ClusterName, "driver", o.Driver)
	ctx = klog.NewContext(ctx, logger)
	spokeConfig, err := o.spokeConfig()
	if err != nil {
		return err
	}
	if o.InstallCRDs {
		if err := ensureAppliedManifestWorkCRD(ctx, spokeConfig); err != nil {
			return err
		}
	}
	if err := ensureNamespace(ctx, spokeConfig, o.Namespace); err != nil {
		return err
	}
	if err := workclient.EnableRawFeedback(); err != nil {
		return err
	}
	health, err := o.serveHealth(ctx)
	if err != nil {
		return err
	}
	defer health()

	common := commonoptions.NewAgentOptions()
	common.SpokeClusterName = o.ClusterName
	common.AgentID = o.AgentID
	common.ComponentNamespace = o.Namespace
	common.HubQPS, common.HubBurst = o.KubeAPIQPS, o.KubeAPIBurst
	common.CommonOpts.QPS, common.CommonOpts.Burst = o.KubeAPIQPS, o.KubeAPIBurst

	work := spoke.NewWorkloadAgentOptions()
	work.MaxJSONRawLength = o.MaxJSONRawLength
	work.StatusSyncInterval = o.StatusSyncInterval
	work.WorkloadSourceDriver = o.Driver
	work.WorkloadSourceConfig = o.HubKubeconfig
	if o.Driver == workclient.TransportGRPC {
		dir, err := os.MkdirTemp("", "argocd-pull-agent-")
		if err != nil {
			return fmt.Errorf("create a directory for the grpc config: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		if work.WorkloadSourceConfig, err = workclient.KeepAliveConfigFile(o.GRPCConfig, dir); err != nil {
			return err
		}
		work.CloudEventsClientID = o.ClientID
		work.CloudEventsClientCodecs = []string{"manifestbundle"}
	}

	if err := o.startConsole(ctx); err != nil {
		return err
	}
	logger.Info("Starting the work agent", "maxJSONRawLength", o.MaxJSONRawLength)
	agent := spoke.NewWorkAgentConfig(common, work)
	controllers := &controllercmd.ControllerContext{KubeConfig: spokeConfig, OperatorNamespace: o.Namespace}
	// OCM's work agent builds its CloudEvents client inside; one stuck on a closed connection is restarted with
	// the whole agent, which lists its works again as after a restart of the process.
	return reconnect.RestartWhenStuck(ctx, func(ctx context.Context) error { return agent.RunWorkloadAgent(ctx, controllers) })
}

// startConsole answers the hub console in the background, when --console-redis-address is set.
func (o *Options) startConsole(ctx context.Context) error {
	if o.ConsoleRedis == "" {
		return nil
	}
	kube, err := o.spokeRawConfig()
	if err != nil {
		return err
	}
	password, err := o.consoleRedisPassword(ctx, kube)
	if err != nil {
		return err
	}
	c, err := consoleagent.New(consoleagent.Config{Cluster: o.ClusterName, AgentID: o.AgentID, GRPCConfig: o.ConsoleGRPCConfig,
		Kube: kube, Redis: o.ConsoleRedis, RedisPassword: password, ArgoCDNamespace: o.ArgoCDNamespace})
	if err != nil {
		return err
	}
	go func() {
		if err := c.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "The console stopped")
		}
	}()
	return nil
}

func (o *Options) spokeConfig() (*rest.Config, error) {
	cfg, err := o.spokeRawConfig()
	if err != nil {
		return nil, err
	}
	return withOperationReset(cfg)
}

// consoleRedisPassword is the password of the cluster's Argo CD redis, from a file or a Secret, or "".
func (o *Options) consoleRedisPassword(ctx context.Context, cfg *rest.Config) (string, error) {
	switch {
	case o.ConsoleRedisPasswordFile != "":
		b, err := os.ReadFile(o.ConsoleRedisPasswordFile)
		if err != nil {
			return "", fmt.Errorf("read --console-redis-password-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	case o.ConsoleRedisPasswordSecret != "":
		ns, name, _ := strings.Cut(o.ConsoleRedisPasswordSecret, "/")
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return "", fmt.Errorf("kubernetes client: %w", err)
		}
		secret, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read the Argo CD redis password: get secret %s: %w", o.ConsoleRedisPasswordSecret, err)
		}
		return string(secret.Data["auth"]), nil
	}
	return "", nil
}

// spokeRawConfig is the managed cluster's config as the kubeconfig gives it.
func (o *Options) spokeRawConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load managed cluster kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	return cfg, nil
}

// ensureAppliedManifestWorkCRD creates the CRD the work agent needs on the managed cluster when it is missing.
// An existing CRD is left as it is (OCM's klusterlet may own it).
func ensureAppliedManifestWorkCRD(ctx context.Context, cfg *rest.Config) error {
	data, err := ocmmanifests.KlusterletManifestFiles.ReadFile(appliedManifestWorkCRD)
	if err != nil {
		return fmt.Errorf("read appliedmanifestwork crd: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return fmt.Errorf("decode appliedmanifestwork crd: %w", err)
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	_, err = client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create crd %s: %w", crd.Name, err)
	}
	if err == nil {
		klog.FromContext(ctx).Info("Created the AppliedManifestWork CRD")
	}
	return nil
}

// ensureNamespace creates the agent's namespace on the managed cluster when it is missing.
func ensureNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// serveHealth serves /healthz until the returned function is called.
func (o *Options) serveHealth(ctx context.Context) (func(), error) {
	if o.HealthAddress == "" || o.HealthAddress == "0" {
		return func() {}, nil
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.HealthAddress)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.HealthAddress, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "health server: %v\n", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
