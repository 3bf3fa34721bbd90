package workclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// MoveFunc returns a cluster's Move (MoveOf of its ManagedCluster's labels).
type MoveFunc func(ctx context.Context, cluster string) (Move, error)

// Router is the Client of a controller that runs one transport or both: each cluster's works go through the
// transport they live on (its Move's Home), reads see the works of every transport, and deletions reach every
// transport that holds the work. While a cluster moves, the works it has in the other transport (copies, or
// works being retired) are the Application reconciler's to handle through Transport.
type Router struct {
	transports map[string]Client
	names      []string
	moves      MoveFunc
	informer   cache.Informer
}

var _ Client = (*Router)(nil)

// NewRouter routes between the transports (by name) with the clusters' moves.
func NewRouter(transports map[string]Client, moves MoveFunc) *Router {
	r := &Router{transports: transports, moves: moves}
	for name := range transports {
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	if len(r.names) == 1 {
		r.informer = transports[r.names[0]].Informer()
	} else {
		infs := make([]cache.Informer, 0, len(r.names))
		for _, n := range r.names {
			infs = append(infs, transports[n].Informer())
		}
		r.informer = &mergedInformer{informers: infs}
	}
	return r
}

// Move returns where a cluster's works are.
func (r *Router) Move(ctx context.Context, cluster string) (Move, error) {
	m, err := r.moves(ctx, cluster)
	if err != nil {
		return m, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	return m, nil
}

// Transport returns a transport by name, or an error that says how to run it.
func (r *Router) Transport(name string) (Client, error) {
	if c, ok := r.transports[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("this controller does not run the %s transport (it runs %s): start it with --transport or "+
		"--migration-transport %s", name, strings.Join(r.names, ", "), name)
}

func (r *Router) home(ctx context.Context, cluster string) (Client, error) {
	m, err := r.Move(ctx, cluster)
	if err != nil {
		return nil, err
	}
	c, err := r.Transport(m.Home)
	if err != nil {
		return nil, fmt.Errorf("the works of cluster %s live on transport %s: %w", cluster, m.Home, err)
	}
	return c, nil
}

// Apply applies the work through the transport its cluster's works live on.
func (r *Router) Apply(ctx context.Context, work *workv1.ManifestWork) error {
	c, err := r.home(ctx, work.Namespace)
	if err != nil {
		return err
	}
	return c.Apply(ctx, work)
}

// Delete deletes the work from every transport that has it and is not deleting it already.
func (r *Router) Delete(ctx context.Context, namespace, name string) error {
	if len(r.names) == 1 {
		return r.transports[r.names[0]].Delete(ctx, namespace, name)
	}
	var errs []error
	for _, n := range r.names {
		c := r.transports[n]
		w, err := c.Get(ctx, namespace, name)
		if apierrors.IsNotFound(err) || (err == nil && !w.DeletionTimestamp.IsZero()) {
			continue
		}
		errs = append(errs, c.Delete(ctx, namespace, name))
	}
	return errors.Join(errs...)
}

// Get returns the work from the transport its cluster's works live on.
func (r *Router) Get(ctx context.Context, namespace, name string) (*workv1.ManifestWork, error) {
	c, err := r.home(ctx, namespace)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, namespace, name)
}

// ListForApplication returns the Application's works in every transport.
func (r *Router) ListForApplication(ctx context.Context, appNamespace, appName string) ([]*workv1.ManifestWork, error) {
	var out []*workv1.ManifestWork
	for _, n := range r.names {
		works, err := r.transports[n].ListForApplication(ctx, appNamespace, appName)
		if err != nil {
			return nil, err
		}
		out = append(out, works...)
	}
	return out, nil
}

// Informer delivers the events of every transport's works.
func (r *Router) Informer() cache.Informer { return r.informer }

// Ready reports why a transport cannot deliver, or nil when all can.
func (r *Router) Ready(ctx context.Context) error {
	var errs []error
	for _, n := range r.names {
		if err := r.transports[n].Ready(ctx); err != nil {
			errs = append(errs, fmt.Errorf("transport %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// mergedInformer is the informers of several transports as one: a handler gets the events of all of them.
type mergedInformer struct {
	informers []cache.Informer
}

var _ cache.Informer = (*mergedInformer)(nil)

// mergedRegistration is a handler's registrations with every informer.
type mergedRegistration struct {
	regs []toolscache.ResourceEventHandlerRegistration
}

func (m *mergedRegistration) HasSynced() bool {
	for _, r := range m.regs {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

func (m *mergedInformer) add(add func(cache.Informer) (toolscache.ResourceEventHandlerRegistration, error)) (toolscache.ResourceEventHandlerRegistration, error) {
	out := &mergedRegistration{}
	for _, inf := range m.informers {
		reg, err := add(inf)
		if err != nil {
			_ = m.RemoveEventHandler(out)
			return nil, err
		}
		out.regs = append(out.regs, reg)
	}
	return out, nil
}

func (m *mergedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandler(h)
	})
}

func (m *mergedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithResyncPeriod(h, p)
	})
}

func (m *mergedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithOptions(h, o)
	})
}

func (m *mergedInformer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	reg, ok := handle.(*mergedRegistration)
	if !ok {
		return fmt.Errorf("not a registration of this informer: %T", handle)
	}
	var errs []error
	for i, r := range reg.regs {
		errs = append(errs, m.informers[i].RemoveEventHandler(r))
	}
	return errors.Join(errs...)
}

func (m *mergedInformer) AddIndexers(toolscache.Indexers) error {
	return errors.New("the works of several transports take no indexers")
}

func (m *mergedInformer) HasSynced() bool {
	for _, inf := range m.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (m *mergedInformer) IsStopped() bool {
	for _, inf := range m.informers {
		if inf.IsStopped() {
			return true
		}
	}
	return false
}
