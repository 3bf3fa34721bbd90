// Command argocd-pull is the Argo CD pull model for Open Cluster Management fleets. Each subcommand wires its
// flags to an options type and runs it; the logic lives in internal/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/argocd-pull/argocd-pull/internal/agent"
	"github.com/argocd-pull/argocd-pull/internal/cmp"
	"github.com/argocd-pull/argocd-pull/internal/demo"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/memlimit"
	"github.com/argocd-pull/argocd-pull/internal/migratecmd"
	"github.com/argocd-pull/argocd-pull/internal/server"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/sim"
	"github.com/argocd-pull/argocd-pull/internal/statuscmd"
	"github.com/argocd-pull/argocd-pull/internal/version"
)

// runnable is what every subcommand's options type provides.
type runnable interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
	Run(ctx context.Context) error
}

// command builds a cobra command around an options type.
func command(use, short string, opts runnable) *cobra.Command {
	cmd := &cobra.Command{
		Use:          use,
		Short:        short,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			return opts.Run(cmd.Context())
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

func main() {
	root := &cobra.Command{
		Use:          "argocd-pull",
		Short:        "The Argo CD pull model for Open Cluster Management fleets",
		SilenceUsage: true,
		// main prints the error once; cobra would print it too.
		SilenceErrors: true,
	}
	root.AddCommand(subcommands()...)
	// Every component logs through klog (the OCM work agent and sdk-go do); controller-runtime too.
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlagSet(klogFlags)
	ctrl.SetLogger(klog.NewKlogr())
	// In a container, the heap stays under its memory limit (see memlimit).
	memlimit.Apply()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// subcommands lists the subcommands, each wired to its options type in internal/.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		command("controller", "Run the hub controllers: deliver pull-model Applications and bring their status back", hubmanager.NewOptions()),
		command("agent", "Run the work agent of one managed cluster", agent.NewOptions()),
		command("status", "Show the fleet from the hub: each ApplicationSet's counts, each Application's cluster, sync, health and message", statuscmd.NewOptions()),
		command("migrate", "Move managed clusters between the basic mode (--to kube) and the Maestro mode (--to grpc) without re-creating their Applications", migratecmd.NewOptions()),
		demoCommand(),
		serverCommand(),
		command("sim", "Run a fleet of simulated managed clusters (agents with a simulated Argo CD) for scale tests", sim.NewOptions()),
		cmpCommand(),
		command("version", "Print the version, git revision, Go version and platform of this build", &version.Options{}),
	}
}

// cmpCommand is `argocd-pull cmp generate`, the Argo CD Config Management Plugin.
func cmpCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "cmp", Short: "Argo CD Config Management Plugin: render an Application's source into ManifestWorks (managed clusters without Argo CD)"}
	cmd.AddCommand(command("generate", "Render the source in the working directory and print one ManifestWork per target cluster (argocd-cmp-server runs it)", cmp.NewGenerateOptions()))
	return cmd
}

// serverCommand is `argocd-pull server` with its migrate and consumers subcommands.
func serverCommand() *cobra.Command {
	cmd := command("server", "Run the Maestro-compatible CloudEvents server on PostgreSQL", server.NewOptions())
	consumers := &cobra.Command{Use: "consumers", Short: "Manage the consumers (managed clusters) of a server"}
	consumers.AddCommand(
		command("create", "Register a consumer", &restapi.ConsumerCreateOptions{}),
		command("list", "List the consumers", &restapi.ConsumerListOptions{}),
		command("delete", "Delete a consumer that has no works", &restapi.ConsumerDeleteOptions{}),
	)
	cmd.AddCommand(command("migrate", "Apply the database migrations and exit", &server.MigrateOptions{}), consumers)
	return cmd
}

// demoCommand is `argocd-pull demo` and `argocd-pull demo down`.
func demoCommand() *cobra.Command {
	cmd := command("demo", "Bring a whole fleet up on loopback and run an ApplicationSet through it", demo.NewOptions())
	cmd.AddCommand(command("down", "Stop a demo started with --detach", &demo.DownOptions{}))
	return cmd
}
