// Package hubmanager runs the hub controllers of argocd-pull (`argocd-pull controller`): it builds the
// controller-runtime manager with a cache sized for large fleets, picks the transport, and registers the
// reconcilers. It wires; the reconcilers' logic lives in their own packages (application, appsetreport,
// gitopscluster).
package hubmanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/gitopscluster"
	"github.com/argocd-pull/argocd-pull/internal/pagedlist"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Options are the flags of `argocd-pull controller`.
type Options struct {
	Kubeconfig string
	Transport  string
	// MigrationTransport is a second transport the controller runs, for `argocd-pull migrate`: a cluster's
	// ManagedCluster labels (workclient.LabelTransport and the others) say which transport its works live on.
	MigrationTransport string

	KubeAPIQPS   float32
	KubeAPIBurst int

	MetricsAddress          string
	HealthAddress           string
	PprofAddress            string
	LeaderElect             bool
	LeaderElectionNamespace string

	Application application.Options
	GRPC        workclient.GRPCOptions
	// GitOpsCluster runs the GitOpsCluster controller (it needs the GitOpsCluster CRD on the hub).
	GitOpsCluster bool
	// AppSetReport runs the MulticlusterApplicationSetReport controller (it needs the report's CRD on the hub).
	AppSetReport        bool
	AppSetReportOptions appsetreport.Options

	// StartedMoreThanOnce lets a process start the controllers several times (tests do): controller-runtime
	// otherwise refuses a second controller of the same name, for the sake of its metrics.
	StartedMoreThanOnce bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Transport:               workclient.TransportKube,
		KubeAPIQPS:              200,
		KubeAPIBurst:            400,
		MetricsAddress:          "127.0.0.1:8080",
		HealthAddress:           "127.0.0.1:8081",
		LeaderElectionNamespace: "open-cluster-management",
		Application: application.Options{
			SpokeArgoCDNamespace: "argocd",
			HubArgoCDNamespace:   "argocd",
			TenancyGate:          true,
			ApplyTimeout:         5 * time.Minute,
			UnknownClusterRetry:  30 * time.Second,
			Workers:              16,
		},
		GitOpsCluster:       true,
		AppSetReport:        true,
		AppSetReportOptions: appsetreport.DefaultOptions(),
		GRPC: workclient.GRPCOptions{
			SourceID:     "argocd-pull",
			PublishQPS:   2000,
			PublishBurst: 4000,
			PageSize:     1000,
			Publishers:   8,
		},
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub (in-cluster config or $KUBECONFIG when empty)")
	fs.StringVar(&o.Transport, "transport", o.Transport, "How works reach the managed clusters: kube (ManifestWork objects on the hub) or grpc (a Maestro-compatible server)")
	fs.StringVar(&o.MigrationTransport, "migration-transport", o.MigrationTransport, "The other transport, run beside --transport while argocd-pull migrate moves clusters between them; "+
		"a cluster's label "+workclient.LabelTransport+" says which one its works live on (default --transport)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the hub apiserver")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the hub apiserver")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address of the Prometheus metrics endpoint (0 to disable)")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", o.HealthAddress, "Address of the /healthz and /readyz endpoints (0 to disable)")
	fs.StringVar(&o.PprofAddress, "pprof-bind-address", o.PprofAddress, "Address of Go's /debug/pprof endpoints (empty to disable)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader so that only one replica reconciles")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease")
	fs.StringVar(&o.Application.SpokeArgoCDNamespace, "spoke-argocd-namespace", o.Application.SpokeArgoCDNamespace, "Namespace Argo CD runs in on the managed clusters")
	fs.StringVar(&o.Application.HubArgoCDNamespace, "hub-argocd-namespace", o.Application.HubArgoCDNamespace, "Namespace of Argo CD (and its AppProjects) on the hub")
	fs.BoolVar(&o.Application.TenancyGate, "tenancy-gate", o.Application.TenancyGate, "Deliver an Application in namespace N only to clusters that a PlacementDecision in N selects")
	fs.BoolVar(&o.Application.EnableLocalCluster, "enable-local-cluster", o.Application.EnableLocalCluster, "Deliver to the cluster labelled local-cluster=true (the hub itself) too")
	fs.DurationVar(&o.Application.ApplyTimeout, "apply-timeout", o.Application.ApplyTimeout, "How long a new work may stay unapplied before its Application shows a DeliveryError")
	fs.IntVar(&o.Application.Workers, "workers", o.Application.Workers, "Concurrent Application reconciles")
	fs.BoolVar(&o.GitOpsCluster, "gitopscluster", o.GitOpsCluster, "Run the GitOpsCluster controller (needs the GitOpsCluster CRD from config/crd)")
	fs.BoolVar(&o.AppSetReport, "appset-report", o.AppSetReport, "Keep a MulticlusterApplicationSetReport per ApplicationSet (needs its CRD from config/crd)")
	o.AppSetReportOptions.AddFlags(fs)
	fs.StringVar(&o.GRPC.ConfigFile, "grpc-config", o.GRPC.ConfigFile, "sdk-go gRPC client config of the server's source endpoint: url, caFile, clientCertFile, clientKeyFile, token or tokenFile (transport grpc)")
	fs.StringVar(&o.GRPC.RESTURL, "server-url", o.GRPC.RESTURL, "REST API of the Maestro(-compatible) server, where works are listed after a start (transport grpc)")
	fs.StringVar(&o.GRPC.SourceID, "source-id", o.GRPC.SourceID, "CloudEvents source ID of this controller (transport grpc)")
	fs.Float32Var(&o.GRPC.PublishQPS, "publish-qps", o.GRPC.PublishQPS, "Spec events per second sent to the server (transport grpc)")
	fs.IntVar(&o.GRPC.PublishBurst, "publish-burst", o.GRPC.PublishBurst, "Burst of spec events sent to the server (transport grpc)")
	fs.IntVar(&o.GRPC.PageSize, "list-page-size", o.GRPC.PageSize, "Page size of the work list read from the server after a start (transport grpc)")
	fs.IntVar(&o.GRPC.Publishers, "publish-connections", o.GRPC.Publishers, "Connections spec events are published over, in parallel (transport grpc)")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.Transport != workclient.TransportKube && o.Transport != workclient.TransportGRPC {
		errs = append(errs, fmt.Errorf("--transport must be %q or %q, not %q", workclient.TransportKube, workclient.TransportGRPC, o.Transport))
	}
	if o.MigrationTransport != "" && (o.MigrationTransport == o.Transport ||
		(o.MigrationTransport != workclient.TransportKube && o.MigrationTransport != workclient.TransportGRPC)) {
		errs = append(errs, fmt.Errorf("--migration-transport must be empty or the transport --transport is not (%q or %q), not %q",
			workclient.TransportKube, workclient.TransportGRPC, o.MigrationTransport))
	}
	if o.Application.Workers < 1 {
		errs = append(errs, errors.New("--workers must be at least 1"))
	}
	if o.runs(workclient.TransportGRPC) {
		if o.GRPC.ConfigFile == "" || o.GRPC.RESTURL == "" || o.GRPC.SourceID == "" {
			errs = append(errs, errors.New("the grpc transport needs --grpc-config, --server-url and --source-id"))
		}
		if o.GRPC.PublishQPS <= 0 || o.GRPC.PublishBurst <= 0 || o.GRPC.PageSize <= 0 || o.GRPC.Publishers <= 0 {
			errs = append(errs, errors.New("--publish-qps, --publish-burst, --list-page-size and --publish-connections must be positive"))
		}
	}
	if o.AppSetReport {
		errs = append(errs, o.AppSetReportOptions.Validate())
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, errors.New("--kube-api-qps and --kube-api-burst must be positive"))
	}
	if o.Application.SpokeArgoCDNamespace == "" || o.Application.HubArgoCDNamespace == "" {
		errs = append(errs, errors.New("--spoke-argocd-namespace and --hub-argocd-namespace must not be empty"))
	}
	return errors.Join(errs...)
}

// runs reports whether the controller runs a transport.
func (o *Options) runs(transport string) bool {
	return o.Transport == transport || o.MigrationTransport == transport
}

// Run runs the controllers until the context ends.
func (o *Options) Run(ctx context.Context) error {
	reconnect.Install()
	cfg, err := ctrl.GetConfig()
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("load hub kubeconfig: %w", err)
	}
	c, err := New(ctx, cfg, o)
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

// Controllers is the running set of hub controllers.
type Controllers struct {
	Manager ctrl.Manager
	Works   *workclient.Router
}

// Scheme returns the scheme of the hub controllers.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.Install, clusterv1beta1.Install, workv1.Install, gitopscluster.AddToScheme, argocd.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// New builds the controllers on a hub.
func New(ctx context.Context, cfg *rest.Config, o *Options) (*Controllers, error) {
	mgr, err := newManager(cfg, o)
	if err != nil {
		return nil, err
	}
	works, err := newWorks(ctx, mgr, o)
	if err != nil {
		return nil, err
	}
	if err := setUpReconcilers(ctx, mgr, works, o); err != nil {
		return nil, err
	}
	return &Controllers{Manager: mgr, Works: works}, nil
}

// Leader election records each new leader as a core/v1 Event on its Lease (the reconcilers' events are
// events.k8s.io ones).
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// newManager builds the manager: its cache holds only what the reconcilers read, in pages, without
// managedFields.
func newManager(cfg *rest.Config, o *Options) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst

	watches, err := rest.HTTPClientFor(OwnConnection(cfg))
	if err != nil {
		return nil, fmt.Errorf("create the watches' hub client: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:         Scheme(),
		MapperProvider: newMapper,
		Cache: cache.Options{
			// The informers on a connection of their own: on the workers' connection a watch's events wait
			// behind their writes whenever the apiserver is busy (see OwnConnection).
			HTTPClient:       watches,
			ByObject:         cacheByObject(o),
			DefaultTransform: cache.TransformStripManagedFields(),
			// Lists in pages, a relist after an expired watch included: at 150,000 Applications one
			// unpaged list does not finish within the apiserver's request timeout.
			NewInformer: pagedlist.NewSharedIndexInformer,
		},
		// Argo CD objects are unstructured; without this the client would read them from the apiserver.
		Client:                  client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:  o.HealthAddress,
		PprofBindAddress:        o.PprofAddress,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "argocd-pull-controller",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		Controller:              config.Controller{SkipNameValidation: ptr.To(o.StartedMoreThanOnce)},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	return mgr, nil
}

// cacheByObject is what the manager's cache keeps of each kind it caches.
func cacheByObject(o *Options) map[client.Object]cache.ByObject {
	byObject := map[client.Object]cache.ByObject{
		&argocd.Application{}:       application.CacheOptions(),
		&clusterv1.ManagedCluster{}: {Transform: managedClusterLabels, UnsafeDisableDeepCopy: ptr.To(true)},
	}
	if o.runs(workclient.TransportKube) {
		byObject[&workv1.ManifestWork{}] = workclient.KubeCacheOptions()
	}
	if o.GitOpsCluster {
		for obj, by := range gitopscluster.CacheByObject() {
			byObject[obj] = by
		}
	}
	return byObject
}

// managedClusterLabels keeps of a cached ManagedCluster its metadata without managedFields: the controllers
// read nothing else (the Application reconciler and the router its local-cluster, transport and migration
// labels, GitOpsCluster the labels it copies to the cluster secrets). The spec and the status, which the
// registration agent rewrites with the cluster's conditions, capacity and claims, are most of the object, and
// every Get from the cache copied them: 2.5 GB of the controller's allocations while 150,000 Applications
// synced, Gets of the same 3,000 clusters. The metadata alone was still copied by each Get (the reconciler
// and the router read a cluster's labels at every reconcile: 3.3 % of the controller's allocations at
// 15,000), so a Get of a ManagedCluster from the cache shares the cached object's labels and annotations, and
// its readers only read them.
func managedClusterLabels(obj any) (any, error) {
	mc, ok := obj.(*clusterv1.ManagedCluster)
	if !ok {
		return obj, nil
	}
	mc.ManagedFields = nil
	mc.Spec, mc.Status = clusterv1.ManagedClusterSpec{}, clusterv1.ManagedClusterStatus{}
	return mc, nil
}

// OwnConnection returns a copy of cfg whose clients do not share a connection with the clients of cfg.
// client-go gives every client of the same server and TLS settings one cached transport, so a process talks to
// the apiserver over one HTTP/2 connection, and the apiserver writes each connection's frames one at a time
// from a single goroutine. A watch that shares it with dozens of concurrent writes gets a small part of it
// when the apiserver's CPU is saturated: at 15,000 Applications the controller read its watch of Applications at
// about 20 events per second while they were created at 65, until the apiserver closed the watch as too slow
// and the informer listed them all again. A dialer of its own gives the copy a transport of its own: each
// client made from the copy has its own connection, so make one and share it.
func OwnConnection(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		return dial(ctx, network, address)
	}
	return cfg
}

// newWorks opens the transports and routes each cluster's works to the one its ManagedCluster's labels name
// (--transport without them); the manager is ready only while the transports are.
func newWorks(ctx context.Context, mgr ctrl.Manager, o *Options) (*workclient.Router, error) {
	transports := map[string]workclient.Client{}
	for _, name := range []string{o.Transport, o.MigrationTransport} {
		var err error
		switch name {
		case "":
			continue
		case workclient.TransportKube:
			transports[name], err = workclient.NewKube(ctx, mgr)
		case workclient.TransportGRPC:
			transports[name], err = workclient.NewGRPC(ctx, o.GRPC)
		default:
			err = fmt.Errorf("unknown transport %q", name)
		}
		if err != nil {
			return nil, err
		}
	}
	reader := mgr.GetClient()
	works := workclient.NewRouter(transports, func(ctx context.Context, cluster string) (workclient.Move, error) {
		mc := &clusterv1.ManagedCluster{}
		if err := reader.Get(ctx, client.ObjectKey{Name: cluster}, mc); err != nil {
			if apierrors.IsNotFound(err) {
				return workclient.Move{Home: o.Transport}, nil
			}
			return workclient.Move{}, fmt.Errorf("get managedcluster %s: %w", cluster, err)
		}
		return workclient.MoveOf(mc.Labels, o.Transport)
	})
	if err := mgr.AddReadyzCheck("works", func(r *http.Request) error { return works.Ready(r.Context()) }); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	return works, nil
}

// setUpReconcilers registers the Application reconciler and the optional GitOpsCluster and report ones.
func setUpReconcilers(ctx context.Context, mgr ctrl.Manager, works *workclient.Router, o *Options) error {
	app := &application.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Works:     works,
		Moves:     works,
		Recorder:  mgr.GetEventRecorder("argocd-pull"),
		Options:   o.Application,
	}
	if err := app.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up application controller: %w", err)
	}
	if o.GitOpsCluster {
		if err := (&gitopscluster.Reconciler{}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up gitopscluster controller: %w", err)
		}
	}
	if o.AppSetReport {
		report := &appsetreport.Reconciler{Client: mgr.GetClient(), Options: o.AppSetReportOptions}
		if err := report.SetupWithManager(ctx, mgr); err != nil {
			return fmt.Errorf("set up appsetreport controller: %w", err)
		}
	}
	return nil
}

// Start runs the controllers until the context ends.
func (c *Controllers) Start(ctx context.Context) error {
	return c.Manager.Start(ctx)
}
