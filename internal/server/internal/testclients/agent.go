// Package testclients holds the clients the server's tests run against it: an unmodified sdk-go agent client
// driven like a work agent, and the hub controller's grpc transport (workclient.NewGRPC). Tests run them in
// their own process, or out of process through the testclient command when the client has to reconnect:
// sdk-go v1.3.0's gRPC transport races with itself on reconnection (see docs/server.md), and a test binary
// built with -race must not contain that code path.
package testclients

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	workv1client "open-cluster-management.io/api/client/work/clientset/versioned/typed/work/v1"
	workinformers "open-cluster-management.io/api/client/work/informers/externalversions"
	workv1 "open-cluster-management.io/api/work/v1"
	clientoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/options"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	workstore "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/store"
)

// reportInterval is how often the agent compares what it holds with what it reports.
const reportInterval = 20 * time.Millisecond

// WorkState is what a client holds of one work.
type WorkState struct {
	Exists     bool  `json:"exists"`
	Generation int64 `json:"generation,omitempty"`
	Deleting   bool  `json:"deleting,omitempty"`
	// Manifests are the names of the work's manifests, joined with commas (agents only: the grpc
	// transport keeps works without their manifests).
	Manifests string `json:"manifests,omitempty"`
	// Applied is the message of the work's Applied condition, AppliedGeneration its observed generation.
	Applied           string `json:"applied,omitempty"`
	AppliedGeneration int64  `json:"appliedGeneration,omitempty"`
}

// StateOf returns what a work shows.
func StateOf(w *workv1.ManifestWork) WorkState {
	if w == nil {
		return WorkState{}
	}
	s := WorkState{Exists: true, Generation: w.Generation, Deleting: !w.DeletionTimestamp.IsZero(), Manifests: ManifestNames(w)}
	if c := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied); c != nil {
		s.Applied, s.AppliedGeneration = c.Message, c.ObservedGeneration
	}
	return s
}

// Agent is an unmodified sdk-go agent client playing a work agent, level-triggered as the work agent is: it
// keeps reporting a work Applied, with the work's generation and a message (the names of its manifests
// unless set otherwise), until its client holds that status, and removes the finalizers of a deleted work
// so that the client reports it deleted. A report that fails is sent again.
type Agent struct {
	cluster string
	holder  *work.ClientHolder
	// works is the one namespaced client the agent uses: sdk-go's client holder sets the namespace of a
	// shared client on every ManifestWorks call, which is not safe from several goroutines.
	works workv1client.ManifestWorkInterface

	mu          sync.Mutex
	messages    map[string]string
	holdDeletes bool
	silent      bool

	received atomic.Int64
}

// StartAgent connects an agent client for the cluster with sdk-go gRPC options (a *grpc.GRPCOptions) and
// starts reporting; it stops when ctx ends.
func StartAgent(ctx context.Context, config any, cluster string) (*Agent, error) {
	opt := clientoptions.NewGenericClientOptions(config, agentcodec.NewManifestBundleCodec(), cluster+"-agent").
		WithClientWatcherStore(workstore.NewAgentInformerWatcherStore()).
		WithClusterName(cluster)
	holder, err := work.NewAgentClientHolder(ctx, opt)
	if err != nil {
		return nil, fmt.Errorf("start the agent client of cluster %s: %w", cluster, err)
	}
	// sdk-go's agent store hands every change to a watch and blocks until it is read: an informer reads it.
	factory := workinformers.NewSharedInformerFactoryWithOptions(holder.WorkInterface(), 0, workinformers.WithNamespace(cluster))
	informer := factory.Work().V1().ManifestWorks().Informer()
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("the informer of the agent of cluster %s did not sync", cluster)
	}
	a := &Agent{cluster: cluster, holder: holder, works: holder.ManifestWorks(cluster), messages: map[string]string{}}
	go a.loop(ctx)
	return a, nil
}

// SetMessage makes the agent report the message for the work from now on; "" goes back to the default.
func (a *Agent) SetMessage(name, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if message == "" {
		delete(a.messages, name)
		return
	}
	a.messages[name] = message
}

// HoldDeletes keeps the agent from confirming deletions while hold is set.
func (a *Agent) HoldDeletes(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holdDeletes = hold
}

// SetSilent keeps the agent from reporting anything while silent is set.
func (a *Agent) SetSilent(silent bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.silent = silent
}

// Received counts spec deliveries: changes of the resource version of the agent's works.
func (a *Agent) Received() int64 { return a.received.Load() }

// Work returns the client's copy of a work, or nil. It reads the client's store, not an informer: sdk-go's
// agent store replaces a work whose name changed without a watch event.
func (a *Agent) Work(ctx context.Context, name string) *workv1.ManifestWork {
	w, err := a.works.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return w
}

func (a *Agent) loop(ctx context.Context) {
	seen := map[string]string{}
	ticker := time.NewTicker(reportInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		list, err := a.works.List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			w := &list.Items[i]
			if seen[w.Name] != w.ResourceVersion {
				seen[w.Name] = w.ResourceVersion
				a.received.Add(1)
			}
			a.reconcile(ctx, w)
		}
	}
}

// reconcile brings what the client reports of a work to what the agent wants reported.
func (a *Agent) reconcile(ctx context.Context, w *workv1.ManifestWork) {
	a.mu.Lock()
	silent, hold, message := a.silent, a.holdDeletes, a.messages[w.Name]
	a.mu.Unlock()
	if silent {
		return
	}
	logger := klog.FromContext(ctx)
	if !w.DeletionTimestamp.IsZero() {
		if !hold && len(w.Finalizers) > 0 {
			// As the work agent does once the manifests are gone; the client then reports Deleted.
			if _, err := a.works.Patch(ctx, w.Name, kubetypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
				logger.V(1).Info("Could not confirm a deletion; trying again", "work", w.Name, "err", err)
			}
		}
		return
	}
	if message == "" {
		message = ManifestNames(w)
	}
	if c := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied); c != nil && c.ObservedGeneration == w.Generation && c.Message == message {
		return
	}
	status := workv1.ManifestWorkStatus{Conditions: []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue,
		Reason: "Applied", Message: message, ObservedGeneration: w.Generation, LastTransitionTime: metav1.Now()}}}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		logger.Error(err, "Could not encode a status patch", "work", w.Name)
		return
	}
	if _, err := a.works.Patch(ctx, w.Name, kubetypes.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		logger.V(1).Info("Could not report a status; trying again", "work", w.Name, "err", err)
	}
}

// ManifestNames is the names of a work's manifests, joined with commas: what the agent reports by default.
func ManifestNames(w *workv1.ManifestWork) string {
	var names []string
	for _, m := range w.Spec.Workload.Manifests {
		var obj struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(m.Raw, &obj)
		names = append(names, obj.Metadata.Name)
	}
	return strings.Join(names, ",")
}

// NewWork is a ManifestWork of ConfigMaps with the given names.
func NewWork(cluster, name string, configMaps ...string) *workv1.ManifestWork {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster,
		Labels: map[string]string{"app": name}, Annotations: map[string]string{"note": "test"}}}
	w.Spec.Workload.Manifests = Manifests(configMaps...)
	return w
}

// Manifests are ConfigMaps with the given names.
func Manifests(configMaps ...string) []workv1.Manifest {
	out := make([]workv1.Manifest, 0, len(configMaps))
	for _, cm := range configMaps {
		raw := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"default"},"data":{"k":"v"}}`, cm)
		out = append(out, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: []byte(raw)}})
	}
	return out
}
