package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/sim"
)

// simResourcesPerApp is how many resources each simulated Application deploys (and lists in its status).
const simResourcesPerApp = 4

// requestCounts are the hub apiserver's requests by verb (apiserver_request_total), under closedWatches and
// closedWorkWatches the watches it closed because their clients did not keep up (apiserver_terminated_watchers_total),
// under streamedLists the lists of Applications it streamed as a watch's first events
// (apiserver_watch_list_duration_seconds), and under refused and a resource's name the writes it answered with an
// error.
type requestCounts map[string]float64

// closedWatches and closedWorkWatches are the keys of requestCounts that count the watches of Applications and
// of ManifestWorks the apiserver closed as too slow: its watch cache gives each watcher a buffer of about a second
// of events and closes the watch of a client that does not read them in time; the client watches again, or lists
// everything again if it fell too far behind. (Every resource's closures are counted under "WATCH-CLOSED " and
// the resource's name.)
const (
	closedWatches     = "WATCH-CLOSED applications.argoproj.io"
	closedWorkWatches = "WATCH-CLOSED manifestworks.work.open-cluster-management.io"
	// streamedLists counts the lists of Applications an informer read as the first events of a watch (WatchList),
	// instead of as LIST pages.
	streamedLists = "WATCHLIST applications"
)

// refused prefixes the resource of the writes the apiserver answered with an error (a 4xx or 5xx code): they
// count among the writes, but wrote nothing.
const refused = "REFUSED "

// hubRequests scrapes the apiserver's request counters, by verb and by "verb resource[/subresource]", the
// watches it closed by resource (closedWatches, closedWorkWatches) and the lists it streamed (streamedLists).
func hubRequests(ctx context.Context, cfg *rest.Config) (requestCounts, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	counts := requestCounts{}
	err = scrapeMetrics(ctx, hc, cfg.Host+"/metrics", func(name, labels string, v float64) {
		switch name {
		case "apiserver_terminated_watchers_total":
			counts["WATCH-CLOSED "+label(labels, "resource")] = v
		case "apiserver_watch_list_duration_seconds_count":
			counts["WATCHLIST "+label(labels, "resource")] += v
		case "apiserver_request_total":
			verb, resource := label(labels, "verb"), label(labels, "resource")
			if sub := label(labels, "subresource"); sub != "" {
				resource += "/" + sub
			}
			counts[verb] += v
			counts[verb+" "+resource] += v
			if code, _ := strconv.Atoi(label(labels, "code")); isWrite(verb) && code >= http.StatusBadRequest {
				counts[refused+resource] += v
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	return counts, nil
}

// queueDepth reads the depth of a controller's work queue (controller-runtime's workqueue_depth, all
// priorities) from the metrics endpoint at addr.
func queueDepth(ctx context.Context, addr, name string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var depth float64
	found := false
	err := scrapeMetrics(ctx, http.DefaultClient, "http://"+addr+"/metrics", func(metric, labels string, v float64) {
		if metric == "workqueue_depth" && label(labels, "name") == name {
			depth, found = depth+v, true
		}
	})
	if err != nil {
		return 0, fmt.Errorf("scrape controller metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("no workqueue_depth of %s at %s", name, addr)
	}
	return int64(depth), nil
}

// scrapeMetrics reads a Prometheus text endpoint and calls each with every sample's metric name, its labels
// (the text between the braces; empty without) and its value. Comments and samples whose value does not parse
// are left out.
func scrapeMetrics(ctx context.Context, hc *http.Client, url string, each func(name, labels string, value float64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := cutLast(line, ' ')
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(series, "{")
		each(name, strings.TrimSuffix(labels, "}"), v)
	}
	return sc.Err()
}

// cutLast is strings.Cut at the last sep.
func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

func label(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// isWrite reports whether an apiserver request verb writes.
func isWrite(verb string) bool {
	return verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "DELETE" || verb == "APPLY"
}

// writesByResource is the writes per minute by resource, those refused included.
func (c requestCounts) writesByResource(minutes float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		verb, resource, ok := strings.Cut(k, " ")
		if ok && isWrite(verb) {
			out[resource] += v / minutes
		}
	}
	return out
}

// refusedByResource is, of writesByResource, the writes per minute the apiserver refused, by resource.
func (c requestCounts) refusedByResource(minutes float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		if resource, ok := strings.CutPrefix(k, refused); ok {
			out[resource] += v / minutes
		}
	}
	return out
}

// sub returns c - base, for the counters that grew.
func (c requestCounts) sub(base requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - base[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// clientFor is a hub client with the benchmark's client settings.
func clientFor(cfg *rest.Config, qps float32, burst int) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = qps, burst
	// Argo CD's own finalizer name draws an apiserver warning on every create; 150,000 of them are noise in the log.
	cfg.WarningHandler = rest.NoWarnings{}
	return client.New(cfg, client.Options{Scheme: hubmanager.Scheme()})
}

// eventWriters counts the Events the hub took between start and end, by the component that wrote them.
func eventWriters(ctx context.Context, cfg *rest.Config, start, end time.Time) (map[string]int, error) {
	c, err := clientFor(cfg, 50, 100)
	if err != nil {
		return nil, err
	}
	var events []corev1.Event
	list := &corev1.EventList{}
	for {
		if err := c.List(ctx, list, client.Limit(500), client.Continue(list.Continue)); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		events = append(events, list.Items...)
		if list.Continue == "" {
			return countEventWriters(events, start, end), nil
		}
	}
}

// countEventWriters counts the events last written between start and end (their times have a second's
// resolution, so start is taken down to its second) by the component that wrote them.
func countEventWriters(events []corev1.Event, start, end time.Time) map[string]int {
	writers := map[string]int{}
	from := start.Truncate(time.Second)
	for i := range events {
		e := &events[i]
		last := e.CreationTimestamp.Time
		for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time} {
			if t.After(last) {
				last = t
			}
		}
		if e.Series != nil && e.Series.LastObservedTime.After(last) {
			last = e.Series.LastObservedTime.Time
		}
		if last.Before(from) || last.After(end) {
			continue
		}
		writer := e.ReportingController
		if writer == "" {
			writer = e.Source.Component
		}
		if writer == "" {
			writer = "unknown"
		}
		writers[writer]++
	}
	return writers
}

// appSetName names the k-th ApplicationSet.
func appSetName(k int) string { return fmt.Sprintf("set-%02d", k) }

// createAppSets creates K ApplicationSets. No ApplicationSet controller runs: createApplications writes the
// Applications it would generate.
func createAppSets(ctx context.Context, c client.Client, namespace string, k int) ([]*unstructured.Unstructured, error) {
	var sets []*unstructured.Unstructured
	for i := range k {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(argocd.ApplicationSetGVK)
		u.SetNamespace(namespace)
		u.SetName(appSetName(i))
		u.Object["spec"] = map[string]any{
			"generators": []any{map[string]any{"clusterDecisionResource": map[string]any{
				"configMapRef":  "ocm-placement-generator",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"cluster.open-cluster-management.io/placement": "all-clusters"}},
			}}},
			"template": map[string]any{"metadata": map[string]any{}, "spec": map[string]any{
				"project": "default", "destination": map[string]any{"server": "{{server}}", "namespace": u.GetName()},
			}},
		}
		if err := c.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("create applicationset %s: %w", u.GetName(), err)
		}
		sets = append(sets, u)
	}
	return sets, nil
}

// pullApplication is the Application the ApplicationSet controller generates for one cluster from a pull-model
// template: owned by the ApplicationSet, labelled and annotated for pull delivery.
func pullApplication(set *unstructured.Unstructured, cluster string) *unstructured.Unstructured {
	app := argocd.NewApplication()
	app.SetNamespace(set.GetNamespace())
	app.SetName(cluster + "-" + set.GetName())
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationSkipReconcile:  "true",
		argocd.AnnotationManagedCluster: cluster,
		argocd.AnnotationAppNamespace:   "argocd",
	})
	app.SetFinalizers([]string{argocd.ResourcesFinalizer})
	yes := true
	app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet",
		Name: set.GetName(), UID: set.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}})
	app.Object["spec"] = map[string]any{
		"project": "default",
		"source": map[string]any{"repoURL": "https://git.example.com/fleet/" + set.GetName() + ".git",
			"targetRevision": "main", "path": "apps/" + set.GetName()},
		"destination": map[string]any{"server": "https://" + cluster + ".ocm-pull.invalid", "namespace": set.GetName()},
		"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}, "syncOptions": []any{"CreateNamespace=true"}},
	}
	return app
}

// forEach runs f over n items with the given concurrency and reports how many failed.
func forEach(ctx context.Context, n, concurrency int, f func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	var failed atomic.Int64
	var first atomic.Value
	for i := range n {
		g.Go(func() error {
			if err := f(gctx, i); err != nil {
				if failed.Add(1) == 1 {
					first.Store(err)
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	if failed := failed.Load(); failed > 0 {
		return fmt.Errorf("%d of %d failed, first: %v", failed, n, first.Load())
	}
	return nil
}

// maxRetries is how many times retried sends a request again: with its backoff, for about half a minute.
const maxRetries = 8

// retried sends one of the benchmark's requests again after a transient apiserver error (a 5xx, an etcd timeout
// under load say, a 429 or a dropped connection), as the ApplicationSet controller would at its next reconcile,
// up to maxRetries times: a 150,000 run is not thrown away for an etcd stall of a few seconds. An error on a retry
// that says an earlier attempt took effect after all (tookEffect: AlreadyExists after a create that timed out)
// ends it as a success. The retries are counted into retries.
func retried(ctx context.Context, retries *atomic.Int64, req func() error, tookEffect func(error) bool) error {
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := req()
		if err == nil || (attempt > 0 && tookEffect != nil && tookEffect(err)) {
			return nil
		}
		if !transient(err) || attempt == maxRetries {
			return err
		}
		retries.Add(1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// transient reports whether a request may succeed if sent again: the apiserver failed it (5xx, 429) or the
// connection dropped.
func transient(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
	}
	return utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || errors.Is(err, syscall.ECONNREFUSED)
}

// meanApplicationBytes is the mean size, as JSON, of the first 100 pull-model Applications of the hub.
func meanApplicationBytes(ctx context.Context, cfg *rest.Config) (int, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	url := cfg.Host + "/apis/argoproj.io/v1alpha1/applications?limit=100&labelSelector=" + argocd.LabelPull + "%3Dtrue"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("list applications: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, fmt.Errorf("decode applications: %w", err)
	}
	if len(list.Items) == 0 {
		return 0, nil
	}
	total := 0
	for _, item := range list.Items {
		total += len(item)
	}
	return total / len(list.Items), nil
}

// floorStatus is the status the hub shows for an Application when the fleet is at rest: the simulated Argo
// CD's status once the Application it receives (its work's Application manifest) has synced, with the
// benchmark's 4 resources per Application. The floor writes the very statuses the fleet's controller writes.
func floorStatus(app *unstructured.Unstructured, cluster string, now time.Time) (map[string]any, error) {
	work, err := application.BuildWork(app, application.BuildOptions{Cluster: cluster,
		WorkName: application.WorkName(app.GetNamespace(), app.GetName()), SpokeArgoCDNamespace: localfleet.ArgoCDNamespace})
	if err != nil {
		return nil, err
	}
	argo := sim.ArgoConfig{ResourcesPerApp: simResourcesPerApp}
	for _, m := range work.Spec.Workload.Manifests {
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(m.Raw); err != nil {
			return nil, err
		}
		if u.GroupVersionKind() == argocd.ApplicationGVK {
			return argo.SyncedStatus(m.Raw, now)
		}
	}
	return nil, fmt.Errorf("the work of application %s has no Application manifest", app.GetName())
}

// floorApplication is the i-th of the floor's Applications: the fleet's, with its resources finalizer, less
// the owner reference to an ApplicationSet the floor's apiserver does not have.
func floorApplication(clusters []string, sets, i int) *unstructured.Unstructured {
	set := &unstructured.Unstructured{}
	set.SetNamespace("default")
	set.SetName(appSetName(i % sets))
	app := pullApplication(set, clusters[i/sets])
	app.SetOwnerReferences(nil)
	return app
}

// measureFloor is the least the hub apiserver needs for the scenario: create the Applications and write each
// status once, with the same client settings. It runs on an apiserver of its own, which is thrown away after.
func measureFloor(ctx context.Context, cfg *rest.Config, clusters []string, sets, concurrency int, qps float32, burst int, retries *atomic.Int64) (time.Duration, error) {
	c, err := clientFor(cfg, qps, burst)
	if err != nil {
		return 0, err
	}
	n := len(clusters) * sets
	start := time.Now()
	err = forEach(ctx, n, concurrency, func(ctx context.Context, i int) error {
		app := floorApplication(clusters, sets, i)
		st, err := floorStatus(app, clusters[i/sets], time.Now())
		if err != nil {
			return err
		}
		status, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": st}})
		if err != nil {
			return err
		}
		if err := retried(ctx, retries, func() error { return c.Create(ctx, app) }, apierrors.IsAlreadyExists); err != nil {
			return err
		}
		return retried(ctx, retries, func() error { return c.Patch(ctx, app, client.RawPatch(types.JSONPatchType, status)) }, nil)
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("floor: %w", err)
	}
	return elapsed, nil
}

// measureDeleteFloor is the least the hub apiserver needs to delete the floor's Applications: delete each one
// and, its resources finalizer holding it, take the finalizer off and the status with it, answered with the
// metadata alone, as the controller does. The fleet does that much and more: there the garbage collector reads
// each Application before it deletes it, and the controller takes the finalizer off once the Application's work
// is gone.
func measureDeleteFloor(ctx context.Context, cfg *rest.Config, clusters []string, sets, concurrency int, qps float32, burst int, retries *atomic.Int64) (time.Duration, error) {
	c, err := clientFor(cfg, qps, burst)
	if err != nil {
		return 0, err
	}
	release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null},"status":null}`))
	start := time.Now()
	err = forEach(ctx, len(clusters)*sets, concurrency, func(ctx context.Context, i int) error {
		app := floorApplication(clusters, sets, i)
		if err := retried(ctx, retries, func() error { return c.Delete(ctx, app) }, nil); err != nil {
			return err
		}
		// Released by an attempt that timed out, the Application is gone.
		return retried(ctx, retries, func() error { return c.Patch(ctx, metadataOf(app), release) }, apierrors.IsNotFound)
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("delete floor: %w", err)
	}
	return elapsed, nil
}

// metadataOf is an Application's name as a PartialObjectMetadata: a write into it is answered with the
// Application's metadata alone.
func metadataOf(app *unstructured.Unstructured) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: app.GetAPIVersion(), Kind: app.GetKind()},
		ObjectMeta: metav1.ObjectMeta{Namespace: app.GetNamespace(), Name: app.GetName()}}
}
