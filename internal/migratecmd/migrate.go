// Package migratecmd is `argocd-pull migrate`: it moves managed clusters between the basic mode (ManifestWork
// objects on the hub, transport kube) and the Maestro mode (argocd-pull server or Maestro, transport grpc),
// cluster by cluster, without deleting or re-creating any Application on a managed cluster. It drives each move
// through the labels of the cluster's ManagedCluster (workclient.LabelTransport, LabelCopyTo, LabelRetire), on
// which the hub controller, run with both transports, delivers, copies and retires the works; the labels also
// keep the move's progress, so a command that was stopped continues where it was. It writes no work itself: it
// checks what it needs before it starts, watches the works in both transports and the hub Applications, and
// stops with a message when something is wrong.
package migratecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Options are the flags of `argocd-pull migrate`.
type Options struct {
	Kubeconfig string
	// To is the transport the clusters move to.
	To string
	// From is where the works of a cluster without the transport label live: the controller's --transport.
	From string
	// Cluster moves one cluster; every ManagedCluster when empty.
	Cluster string
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// SourceID is the controller's CloudEvents source ID, whose works the server holds.
	SourceID string
	// ClusterTimeout bounds each step of a cluster's move: the copies applied, the old works removed, the
	// statuses current.
	ClusterTimeout time.Duration
	// Parallel is how many clusters move at once.
	Parallel int
	// Server is the argocd-pull server (or Maestro) REST API, with an admin's credentials.
	Server restapi.ClientOptions

	// Out receives the plan and the progress; the standard output when nil.
	Out io.Writer
	// PollInterval is how often a step looks again; one second when zero.
	PollInterval time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{SourceID: "argocd-pull", ClusterTimeout: 10 * time.Minute, Parallel: 4}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub ($KUBECONFIG, in-cluster config or ~/.kube/config when empty)")
	fs.StringVar(&o.To, "to", o.To, "Transport to move the clusters to: grpc (Maestro mode) or kube (basic mode)")
	fs.StringVar(&o.From, "from", o.From, "Where the works of clusters without the "+workclient.LabelTransport+" label live: the controller's --transport (default: the transport --to is not)")
	fs.StringVar(&o.Cluster, "cluster", o.Cluster, "Move this managed cluster only (every ManagedCluster when empty)")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Print the plan and change nothing")
	fs.StringVar(&o.SourceID, "source-id", o.SourceID, "CloudEvents source ID of the controller (its --source-id)")
	fs.DurationVar(&o.ClusterTimeout, "cluster-timeout", o.ClusterTimeout, "How long each step of a cluster's move may take before the command stops")
	fs.IntVar(&o.Parallel, "parallel", o.Parallel, "Clusters moved at once")
	o.Server.AddFlags(fs)
}

// Validate checks the flags.
func (o *Options) Validate() error {
	errs := []error{o.Server.Validate()}
	if !slices.Contains(workclient.Transports, o.To) {
		errs = append(errs, fmt.Errorf("--to must be %q or %q, not %q", workclient.TransportGRPC, workclient.TransportKube, o.To))
	}
	if o.From == "" {
		o.From = other(o.To)
	}
	if !slices.Contains(workclient.Transports, o.From) {
		errs = append(errs, fmt.Errorf("--from must be %q or %q, not %q", workclient.TransportGRPC, workclient.TransportKube, o.From))
	}
	if o.Cluster != "" && !restapi.IsConsumerName(o.Cluster) {
		errs = append(errs, fmt.Errorf("--cluster %q is not a cluster name", o.Cluster))
	}
	if o.ClusterTimeout <= 0 || o.Parallel < 1 {
		errs = append(errs, errors.New("--cluster-timeout must be positive and --parallel at least 1"))
	}
	if o.SourceID == "" {
		errs = append(errs, errors.New("--source-id must not be empty"))
	}
	return errors.Join(errs...)
}

// other is the transport that name is not.
func other(name string) string {
	if name == workclient.TransportKube {
		return workclient.TransportGRPC
	}
	return workclient.TransportKube
}

// Run moves the clusters: it reads where each one is, prints the plan, checks what the moves need, then moves
// the clusters, Parallel at a time, and stops at the first that fails.
func (o *Options) Run(ctx context.Context) error {
	m, err := o.newMigration()
	if err != nil {
		return err
	}
	if err := m.server.Ready(ctx); err != nil {
		return fmt.Errorf("the server at %s: %w", m.server.URL(), err)
	}
	clusters, err := m.clusters(ctx)
	if err != nil {
		return err
	}
	plans := make([]plan, len(clusters))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, mc := range clusters {
		g.Go(func() (err error) {
			plans[i], err = m.plan(gctx, mc)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	m.printPlan(plans)
	if o.DryRun {
		return nil
	}
	todo := slices.DeleteFunc(plans, func(p plan) bool { return p.done() })
	if len(todo) == 0 {
		m.printf("==> every cluster's works live on %s already\n", o.To)
		return nil
	}
	if err := m.prerequisites(ctx, todo); err != nil {
		return err
	}
	return m.moveAll(ctx, todo, len(plans)-len(todo))
}

// migration is one run of the command.
type migration struct {
	*Options
	hub    client.Client
	server *restapi.Client
	out    io.Writer
	bar    *progress
}

func (o *Options) newMigration() (*migration, error) {
	// controller-runtime's config: $KUBECONFIG, in-cluster, ~/.kube/config; an explicit file wins.
	cfg, err := ctrl.GetConfig()
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("load hub kubeconfig: %w", err)
	}
	hub, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	server, err := o.Server.Client()
	if err != nil {
		return nil, err
	}
	out := o.Out
	if out == nil {
		out = os.Stdout
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	return &migration{Options: o, hub: hub, server: server, out: out, bar: newProgress(out)}, nil
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.Install, workv1.Install, argocd.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

func (m *migration) printf(format string, args ...any) {
	m.bar.clear()
	_, _ = fmt.Fprintf(m.out, format, args...)
	m.bar.redraw()
}

// clusters returns the ManagedClusters to move, by name.
func (m *migration) clusters(ctx context.Context) ([]clusterv1.ManagedCluster, error) {
	if m.Cluster != "" {
		mc := clusterv1.ManagedCluster{}
		if err := m.hub.Get(ctx, client.ObjectKey{Name: m.Cluster}, &mc); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("managed cluster %s does not exist on the hub", m.Cluster)
			}
			return nil, fmt.Errorf("get managedcluster %s: %w", m.Cluster, err)
		}
		return []clusterv1.ManagedCluster{mc}, nil
	}
	list := &clusterv1.ManagedClusterList{}
	if err := m.hub.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list managedclusters: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b clusterv1.ManagedCluster) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// moveAll moves the clusters, Parallel at a time; the first failure stops the others where they are.
func (m *migration) moveAll(ctx context.Context, todo []plan, already int) error {
	total := len(todo) + already
	m.bar.start(total, already)
	defer m.bar.finish()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(m.Parallel)
	for _, p := range todo {
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil
			}
			m.bar.moving(p.cluster, 1)
			res, err := m.move(gctx, p.cluster)
			m.bar.moving(p.cluster, -1)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", p.cluster, err)
			}
			m.bar.done()
			m.printf("cluster %s: on %s, %s moved, every Application kept (same uid on the cluster)%s\n",
				p.cluster, m.To, count(res.works, "work"), res.note())
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		m.bar.finish()
		return fmt.Errorf("%w\nnothing was lost: every cluster's Applications live on works of the transport its %s label names, "+
			"and the labels keep each move's progress; run the command again to continue, or with --to %s to go back",
			err, workclient.LabelTransport, other(m.To))
	}
	m.bar.finish()
	m.printf("==> %s on %s\n", count(total, "cluster"), m.To)
	if m.Cluster == "" {
		m.printf("every cluster is on %s: the controller may now run with --transport=%s alone, and the %s agents may stop\n",
			m.To, m.To, other(m.To))
	}
	return nil
}
