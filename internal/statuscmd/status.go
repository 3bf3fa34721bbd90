// Package statuscmd is `argocd-pull status`: a kubectl-style view of the fleet from the hub. It reads the hub's
// pull-model Applications (whose status the controller keeps in step with the managed clusters, whatever the
// transport) and shows each ApplicationSet's counts and each Application's cluster, sync, health and message;
// with --watch it then follows the changes through a watch. It only reads.
package statuscmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Options are the flags of `argocd-pull status`.
type Options struct {
	Kubeconfig string
	// Namespace limits the view to one namespace; all namespaces when empty.
	Namespace string
	// AppSet limits the view to the Applications of one ApplicationSet.
	AppSet string
	// Output is "" (table), wide, json or yaml.
	Output string
	// Watch follows the changes after the first view.
	Watch bool
	// PageSize is the number of Applications read per request.
	PageSize int64

	// Out and ErrOut default to the standard output and error.
	Out, ErrOut io.Writer
	// config overrides Kubeconfig (tests).
	config *rest.Config
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{PageSize: 500}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub ($KUBECONFIG, ~/.kube/config or in-cluster config when empty)")
	fs.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Show only this namespace (all namespaces when empty)")
	fs.StringVar(&o.AppSet, "appset", o.AppSet, "Show only the Applications of this ApplicationSet")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: wide, json or yaml (a table when empty)")
	fs.BoolVarP(&o.Watch, "watch", "w", o.Watch, "After the first view, show each change of an Application as it happens")
	fs.Int64Var(&o.PageSize, "chunk-size", o.PageSize, "Applications read per request")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	switch o.Output {
	case OutputTable, OutputWide, OutputJSON, OutputYAML:
	default:
		errs = append(errs, fmt.Errorf("--output must be wide, json or yaml, not %q", o.Output))
	}
	if o.PageSize <= 0 {
		errs = append(errs, errors.New("--chunk-size must be positive"))
	}
	return errors.Join(errs...)
}

var applicationsResource = schema.GroupVersionResource{Group: argocd.Group, Version: argocd.Version, Resource: "applications"}

// Run shows the fleet, and with Watch its changes until the context ends.
func (o *Options) Run(ctx context.Context) error {
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create hub client: %w", err)
	}
	apps := dyn.Resource(applicationsResource).Namespace(o.Namespace)
	out, errOut := o.Out, o.ErrOut
	if out == nil {
		out = os.Stdout
	}
	if errOut == nil {
		errOut = os.Stderr
	}

	observed, rv, err := o.list(ctx, apps)
	if err != nil {
		return err
	}
	p := &printer{w: out, output: o.Output, allNamespaces: o.Namespace == "", events: o.Watch}
	if len(observed) == 0 && !o.Watch && (o.Output == OutputTable || o.Output == OutputWide) {
		_, err := fmt.Fprintln(errOut, o.noneFound())
		return err
	}
	if err := p.printView(NewView(observed)); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	rows := make(map[types.NamespacedName]Application, len(observed))
	for _, obs := range observed {
		rows[types.NamespacedName{Namespace: obs.Namespace, Name: obs.Name}] = NewApplication(obs)
	}
	return o.watch(ctx, apps, rv, rows, p)
}

func (o *Options) restConfig() (*rest.Config, error) {
	if o.config != nil {
		return o.config, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load hub kubeconfig: %w", err)
	}
	return cfg, nil
}

func (o *Options) noneFound() string {
	where := "any namespace"
	if o.Namespace != "" {
		where = "namespace " + o.Namespace
	}
	if o.AppSet != "" {
		return fmt.Sprintf("No pull-model Applications of ApplicationSet %s found in %s.", o.AppSet, where)
	}
	return fmt.Sprintf("No pull-model Applications found in %s.", where)
}

func pullSelector() string {
	return labels.SelectorFromSet(labels.Set{argocd.LabelPull: "true"}).String()
}

// selected reports whether the view shows an Application.
func (o *Options) selected(app *unstructured.Unstructured) bool {
	return argocd.IsPullApplication(app) && (o.AppSet == "" || argocd.OwningAppSet(app) == o.AppSet)
}

// list reads the pull-model Applications page by page, keeping only what the view shows of each, and returns
// them with the resource version to watch from.
func (o *Options) list(ctx context.Context, apps dynamic.ResourceInterface) ([]appsetreport.Observed, string, error) {
	var (
		observed []appsetreport.Observed
		rv       string
		cont     string
	)
	for {
		list, err := apps.List(ctx, metav1.ListOptions{LabelSelector: pullSelector(), Limit: o.PageSize, Continue: cont})
		if err != nil {
			return nil, "", fmt.Errorf("list applications: %w", err)
		}
		if rv == "" {
			rv = list.GetResourceVersion()
		}
		for i := range list.Items {
			if !o.selected(&list.Items[i]) {
				continue
			}
			app, err := argocd.ApplicationFromUnstructured(&list.Items[i])
			if err != nil {
				return nil, "", err
			}
			observed = append(observed, appsetreport.Observe(app))
		}
		if cont = list.GetContinue(); cont == "" {
			return observed, rv, nil
		}
	}
}

// watch prints each change of a shown Application, from resource version rv on. When the watch ends it is
// opened again from the last version seen; when that version is too old, the Applications are listed again
// and the differences printed.
func (o *Options) watch(ctx context.Context, apps dynamic.ResourceInterface, rv string, rows map[types.NamespacedName]Application, p *printer) error {
	for ctx.Err() == nil {
		opened := time.Now()
		w, err := apps.Watch(ctx, metav1.ListOptions{LabelSelector: pullSelector(), ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch applications: %w", err)
		}
		rv, err = o.follow(ctx, w, rv, rows, p)
		w.Stop()
		var gone *goneError
		switch {
		case errors.As(err, &gone):
			observed, newRV, err := o.list(ctx, apps)
			if err != nil {
				return err
			}
			if err := relisted(observed, rows, p); err != nil {
				return err
			}
			rv = newRV
		case err != nil:
			return err
		}
		// A watch the server ends at once is not opened again at once.
		if wait := time.Second - time.Since(opened); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	return nil
}

type goneError struct{ err error }

func (e *goneError) Error() string { return e.err.Error() }

// follow prints the events of one watch until it ends, and returns the last resource version seen.
func (o *Options) follow(ctx context.Context, w watch.Interface, rv string, rows map[types.NamespacedName]Application, p *printer) (string, error) {
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return rv, &goneError{err: err}
				}
				return rv, fmt.Errorf("watch applications: %w", err)
			}
			app, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = app.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			if err := o.apply(ev.Type, app, rows, p); err != nil {
				return rv, err
			}
		}
	}
}

// apply prints an event when it changes what the view shows.
func (o *Options) apply(typ watch.EventType, app *unstructured.Unstructured, rows map[types.NamespacedName]Application, p *printer) error {
	key := types.NamespacedName{Namespace: app.GetNamespace(), Name: app.GetName()}
	old, shown := rows[key]
	if typ == watch.Deleted || !o.selected(app) {
		if !shown {
			return nil
		}
		delete(rows, key)
		return p.printEvent(string(watch.Deleted), old)
	}
	typed, err := argocd.ApplicationFromUnstructured(app)
	if err != nil {
		return err
	}
	row := NewApplication(appsetreport.Observe(typed))
	if shown && reflect.DeepEqual(old, row) {
		return nil
	}
	rows[key] = row
	event := watch.Modified
	if !shown {
		event = watch.Added
	}
	return p.printEvent(string(event), row)
}

// relisted prints the differences between the rows shown and a new list.
func relisted(observed []appsetreport.Observed, rows map[types.NamespacedName]Application, p *printer) error {
	seen := make(map[types.NamespacedName]bool, len(observed))
	for _, obs := range observed {
		key := types.NamespacedName{Namespace: obs.Namespace, Name: obs.Name}
		seen[key] = true
		row := NewApplication(obs)
		old, shown := rows[key]
		if shown && reflect.DeepEqual(old, row) {
			continue
		}
		rows[key] = row
		event := watch.Modified
		if !shown {
			event = watch.Added
		}
		if err := p.printEvent(string(event), row); err != nil {
			return err
		}
	}
	var gone []types.NamespacedName
	for key := range rows {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	slices.SortFunc(gone, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range gone {
		row := rows[key]
		delete(rows, key)
		if err := p.printEvent(string(watch.Deleted), row); err != nil {
			return err
		}
	}
	return nil
}
