// Package demo is `argocd-pull demo`: it brings a whole fleet up on loopback (a hub and managed clusters,
// PostgreSQL and argocd-pull server, an agent and a real Argo CD per cluster, the hub controller and Argo CD's
// ApplicationSet controller), runs the sample ApplicationSet through it, and shows the fleet's Applications
// from the hub until every one is Synced and Healthy. The fleet then keeps running until it is stopped. With
// --cmp it runs the CMP variant instead: Argo CD on the hub with argocd-pull's plugin, the work agent alone on
// the managed clusters. It owns the sample and what the user is told; starting the processes is
// internal/localfleet's.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// readyMarker is the line the demo prints once the fleet is up and every Application is Synced and Healthy;
// a detached demo's parent waits for it.
const readyMarker = "The fleet is running."

// Options are the flags of `argocd-pull demo`.
type Options struct {
	Dir       string
	Clusters  int
	Transport string
	CMP       bool
	Detach    bool
	Timeout   time.Duration

	out io.Writer
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{Dir: ".demo", Clusters: 3, Transport: workclient.TransportGRPC, Timeout: 15 * time.Minute, out: os.Stdout}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "dir", o.Dir, "Directory of the fleet's state: kubeconfigs, certificates, logs (replaced at start)")
	fs.IntVar(&o.Clusters, "clusters", o.Clusters, "Number of managed clusters")
	fs.StringVar(&o.Transport, "transport", o.Transport, "grpc (Maestro mode: PostgreSQL and argocd-pull server) or kube (ManifestWorks on the hub)")
	fs.BoolVar(&o.CMP, "cmp", o.CMP, "Run the CMP variant (docs/cmp.md): the hub's Argo CD renders the guestbook with argocd-pull's plugin into "+
		"ManifestWorks and the managed clusters run only the work agent (implies --transport=kube)")
	fs.BoolVar(&o.Detach, "detach", o.Detach, "Leave the fleet running in the background once it is up (stop it with `argocd-pull demo down`)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long the fleet may take to start and every Application to be Synced and Healthy")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.Clusters < 1 || o.Clusters > 20 {
		errs = append(errs, errors.New("--clusters must be between 1 and 20"))
	}
	if o.CMP {
		o.Transport = workclient.TransportKube
	}
	if o.Transport != workclient.TransportGRPC && o.Transport != workclient.TransportKube {
		errs = append(errs, fmt.Errorf("--transport must be %q or %q", workclient.TransportGRPC, workclient.TransportKube))
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("--dir: %w", err))
	}
	o.Dir = abs
	return errors.Join(errs...)
}

// Run runs the demo: in the foreground until interrupted, or detached.
func (o *Options) Run(ctx context.Context) error {
	if pid, ok := runningDemo(o.Dir); ok {
		return fmt.Errorf("a demo is already running in %s (pid %d): stop it with `argocd-pull demo down --dir %s`", o.Dir, pid, o.Dir)
	}
	if o.Detach {
		return o.detach(ctx)
	}
	return o.foreground(ctx)
}

func (o *Options) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(o.out, format, args...)
}

// foreground brings the fleet up, shows it, and keeps it until the context ends.
func (o *Options) foreground(ctx context.Context) error {
	if err := os.RemoveAll(o.Dir); err != nil {
		return fmt.Errorf("clear %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", o.Dir, err)
	}
	if err := os.WriteFile(pidFile(o.Dir), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil { //nolint:gosec // a pid file
		return fmt.Errorf("write pid file: %w", err)
	}
	defer func() { _ = os.Remove(pidFile(o.Dir)) }()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	start := time.Now()
	var clusters []string
	for i := 1; i <= o.Clusters; i++ {
		clusters = append(clusters, "cluster"+strconv.Itoa(i))
	}
	// One deadline for the fleet's start and the sample's rollout: a loaded machine takes longer for either.
	upCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	f, err := localfleet.Start(upCtx, localfleet.Options{
		Dir: o.Dir, Clusters: clusters, Transport: o.Transport, Binary: self, ArgoCD: true, CMP: o.CMP,
		Progress: func(s string) { o.printf("==> %s\n", s) },
	})
	if err != nil {
		return fmt.Errorf("start the fleet (--timeout %s): %w", o.Timeout, err)
	}
	f.KeepDir()
	defer func() {
		o.printf("==> stopping the fleet\n")
		f.Stop()
	}()
	o.printf("==> fleet up in %s\n", time.Since(start).Round(time.Second))

	if err := o.runSample(upCtx, f); err != nil {
		return err
	}
	cancel()
	o.printf("==> every Application Synced and Healthy %s after start\n\n", time.Since(start).Round(time.Second))
	o.printInstructions(f)
	<-ctx.Done()
	return nil
}

// DownOptions are the flags of `argocd-pull demo down`.
type DownOptions struct {
	Dir string
}

// AddFlags registers the flags.
func (o *DownOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "dir", ".demo", "Directory of the demo's state")
}

// Validate checks the flags.
func (o *DownOptions) Validate() error {
	abs, err := filepath.Abs(o.Dir)
	o.Dir = abs
	return err
}

// Run stops a detached demo and waits for it to end.
func (o *DownOptions) Run(ctx context.Context) error {
	pid, ok := runningDemo(o.Dir)
	if !ok {
		fmt.Printf("no demo is running in %s\n", o.Dir)
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop demo (pid %d): %w", pid, err)
	}
	for {
		if _, ok := runningDemo(o.Dir); !ok {
			fmt.Printf("demo stopped (state kept in %s)\n", o.Dir)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func pidFile(dir string) string { return filepath.Join(dir, "demo.pid") }

// runningDemo returns the pid of a demo running in dir.
func runningDemo(dir string) (int, bool) {
	b, err := os.ReadFile(pidFile(dir)) //nolint:gosec // our own pid file
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, false
	}
	return pid, true
}
