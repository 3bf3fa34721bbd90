package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/sim"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// status is what the observer compares between a hub Application and its cluster's copy.
type status struct {
	Sync, Health, Revision, OperationPhase string
}

func (s status) settled() bool { return s.Sync == "Synced" && s.Health == "Healthy" }

func (s status) String() string {
	return fmt.Sprintf("%s/%s %s %s", s.Sync, s.Health, shortRevision(s.Revision), s.OperationPhase)
}

func shortRevision(r string) string { return r[:min(len(r), 8)] }

// hubApp is what the observer keeps of a hub Application.
type hubApp struct {
	status
	deleting bool
}

// observer sees the whole fleet: the hub's Applications (a watch), every cluster's copies (the real clusters'
// apiservers, the simulators' /applications) and the works on the server (its REST API).
type observer struct {
	f     *fleet
	mu    sync.Mutex
	hub   map[string]hubApp
	stop  chan struct{}
	spoke map[string]client.Client
	http  *http.Client
}

func newObserver(ctx context.Context, f *fleet) (*observer, error) {
	o := &observer{f: f, hub: map[string]hubApp{}, stop: make(chan struct{}), spoke: map[string]client.Client{},
		http: &http.Client{Timeout: 10 * time.Second}}
	for _, c := range f.real {
		cl, err := f.ClusterClient(c)
		if err != nil {
			return nil, err
		}
		o.spoke[c] = cl
	}
	if err := o.watchHub(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// watchHub keeps o.hub in step with the hub's pull-model Applications, thin: the status stays raw until the
// transform reads the fields compared.
func (o *observer) watchHub(ctx context.Context) error {
	inf, err := testutil.PullApplicationInformer(o.f.Env.Hub.Config(), o.f.hub.Scheme())
	if err != nil {
		return err
	}
	if err := inf.SetTransform(func(obj any) (any, error) {
		if app, ok := obj.(*argocd.Application); ok {
			return app, app.Compact()
		}
		return obj, nil
	}); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.observe(obj, false) },
		UpdateFunc: func(_, obj any) { o.observe(obj, false) },
		DeleteFunc: func(obj any) { o.observe(obj, true) },
	}); err != nil {
		return err
	}
	go inf.Run(o.stop)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the watch of the hub's Applications did not sync")
	}
	return nil
}

func (o *observer) observe(obj any, deleted bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	app, ok := obj.(*argocd.Application)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.hub, app.Name)
		return
	}
	o.hub[app.Name] = hubApp{status: summaryStatus(app.StatusSummary()), deleting: !app.DeletionTimestamp.IsZero()}
}

func summaryStatus(s *argocd.StatusSummary) status {
	return status{Sync: s.Sync, Health: s.Health, Revision: s.Revision, OperationPhase: s.OperationPhase}
}

func (o *observer) close() { close(o.stop) }

// snapshot is the fleet's state at one moment, for the Applications of one prefix (a case).
type snapshot struct {
	at  time.Time
	hub map[string]hubApp
	// spoke are the clusters' copies by hub Application name; err says why some could not be read.
	spoke map[string]status
	err   error
	// works is how many works the server holds (every case's), or -1 when it did not answer.
	works int
}

// take reads the fleet's state.
func (o *observer) take(ctx context.Context, prefix string) *snapshot {
	s := &snapshot{at: time.Now(), hub: map[string]hubApp{}, spoke: map[string]status{}, works: -1}
	o.mu.Lock()
	for name, a := range o.hub {
		if strings.HasPrefix(name, prefix) {
			s.hub[name] = a
		}
	}
	o.mu.Unlock()
	var errs []error
	for c, cl := range o.spoke {
		list := &argocd.ApplicationList{}
		if err := cl.List(ctx, list, client.InNamespace(localfleet.ArgoCDNamespace)); err != nil {
			errs = append(errs, fmt.Errorf("list the Applications of %s: %w", c, err))
			continue
		}
		for i := range list.Items {
			if app := &list.Items[i]; strings.HasPrefix(app.Name, prefix) {
				s.spoke[app.Name] = summaryStatus(app.StatusSummary())
			}
		}
	}
	for _, addr := range o.f.simAddr {
		views, err := o.simApplications(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range views {
			if strings.HasPrefix(v.HubName, prefix) {
				s.spoke[v.HubName] = status{Sync: v.Sync, Health: v.Health, Revision: v.Revision, OperationPhase: v.OperationPhase}
			}
		}
	}
	if n, err := o.f.ServerClient().CountResourceBundles(ctx); err == nil {
		s.works = n
	} else {
		errs = append(errs, fmt.Errorf("count the works: %w", err))
	}
	s.err = errors.Join(errs...)
	return s
}

func (o *observer) simApplications(ctx context.Context, addr string) ([]sim.ApplicationView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/applications", nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the simulated Applications: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the simulated Applications: %s", resp.Status)
	}
	var views []sim.ApplicationView
	if err := json.NewDecoder(resp.Body).Decode(&views); err != nil {
		return nil, fmt.Errorf("decode the simulated Applications: %w", err)
	}
	return views, nil
}

// bundle is what the observer reads of a work on the server.
type bundle struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	ConsumerName string `json:"consumer_name"`
	Metadata     struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// worksWithoutApplication lists the server's works of the prefix's Applications whose hub Application does not
// exist.
func (o *observer) worksWithoutApplication(ctx context.Context, prefix string) ([]string, error) {
	o.mu.Lock()
	hub := make(map[string]bool, len(o.hub))
	for name := range o.hub {
		hub[name] = true
	}
	o.mu.Unlock()
	var orphans []string
	err := restapi.EachResourceBundle(ctx, o.f.ServerClient(), "", nil, 500, func(b bundle) string { return b.ID }, func(b bundle) error {
		app := b.Metadata.Annotations[argocd.AnnotationHubAppName]
		if strings.HasPrefix(app, prefix) && !hub[app] {
			orphans = append(orphans, b.ConsumerName+"/"+b.Name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the works: %w", err)
	}
	return orphans, nil
}
