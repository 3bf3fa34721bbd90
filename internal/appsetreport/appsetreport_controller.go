// Package appsetreport keeps one MulticlusterApplicationSetReport per ApplicationSet that has pull-model
// Applications: the counts of its Applications by sync and health status, the ones that need attention with
// their errors, and the resources it deploys. It is built from the Applications' status in the controller's
// cache, event-driven and coalesced, so a burst of status changes costs at most one write per report per
// interval. See docs/report.md. It reads Applications and writes reports only;
// it never changes an Application.
package appsetreport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/reconcilequeue"
)

const (
	// FieldOwner is the field manager of the reports' writes.
	FieldOwner = "argocd-pull-appsetreport"
	// ControllerName names the controller and its logger.
	ControllerName = "appsetreport"
)

// Options configure the reconciler.
type Options struct {
	// Interval is the least time between two evaluations, and so two writes, of one report.
	Interval time.Duration
	// Workers is the number of reports evaluated at once.
	Workers int
	// WriteBytesPerSecond bounds the bytes of reports written per second, all reports together (0: no bound).
	WriteBytesPerSecond int
	// Limits bound the size of a report.
	Limits Limits
}

// DefaultOptions are the defaults of `argocd-pull controller`.
func DefaultOptions() Options {
	return Options{Interval: 5 * time.Second, Workers: 2, WriteBytesPerSecond: 64 << 10, Limits: DefaultLimits()}
}

// AddFlags registers the flags of the report.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "appset-report-interval", o.Interval, "Least time between two writes of one MulticlusterApplicationSetReport; changes in between are written together")
	fs.IntVar(&o.WriteBytesPerSecond, "appset-report-write-bytes-per-second", o.WriteBytesPerSecond, "Most bytes of MulticlusterApplicationSetReports written per second, all reports together; writes over it are put off and show the state of when they are made (0: no bound)")
	fs.IntVar(&o.Limits.MaxClusterConditions, "appset-report-max-clusters", o.Limits.MaxClusterConditions, "Most per-cluster entries in a MulticlusterApplicationSetReport; larger ApplicationSets list only the Applications that are not Synced and Healthy")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Interval <= 0 {
		errs = append(errs, errors.New("--appset-report-interval must be positive"))
	}
	if o.WriteBytesPerSecond < 0 {
		errs = append(errs, errors.New("--appset-report-write-bytes-per-second must not be negative"))
	}
	if o.Limits.MaxClusterConditions < 0 {
		errs = append(errs, errors.New("--appset-report-max-clusters must not be negative"))
	}
	return errors.Join(errs...)
}

var writes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "argocd_pull_appset_report_writes_total",
	Help: "Writes of MulticlusterApplicationSetReports, by operation (create, update, delete).",
}, []string{"operation"})

var evaluations = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "argocd_pull_appset_report_evaluations_total",
	Help: "Evaluations of MulticlusterApplicationSetReports: each reads the ApplicationSet's Applications from the cache.",
})

func init() {
	ctrlmetrics.Registry.MustRegister(writes, evaluations)
}

// Reconciler keeps the MulticlusterApplicationSetReport of each ApplicationSet in step with its Applications.
type Reconciler struct {
	// Client reads ApplicationSets (metadata) and reports from the manager's cache and writes reports to the
	// hub; Applications are read from the cache's index (apps). Defaults to the manager's client.
	Client  client.Client
	Options Options

	// now is the clock; time.Now when nil.
	now      func() time.Time
	coalesce *coalescer
	budget   *writeBudget
	memos    memos
	// apps is the cache's index of Applications by ApplicationSet.
	apps toolscache.Indexer
	// rest writes reports (Client cannot ask for an answer of metadata alone to a create or an update).
	rest rest.Interface
}

// +kubebuilder:rbac:groups=apps.open-cluster-management.io,resources=multiclusterapplicationsetreports,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=argoproj.io,resources=applicationsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=argoproj.io,resources=applications,verbs=get;list;watch

// SetupWithManager registers the reconciler and its watches; an unset interval or unset limits take the
// defaults. The manager's cache must hold Applications as application.CacheOptions sets them up.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	defaults := DefaultOptions()
	if r.Options.Interval == 0 {
		r.Options.Interval = defaults.Interval
	}
	if r.Options.Limits == (Limits{}) {
		r.Options.Limits = defaults.Limits
	}
	if err := r.Options.Validate(); err != nil {
		return err
	}
	rc, err := newRESTClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	r.rest = rc
	r.coalesce = newCoalescer(r.Options.Interval)
	r.budget = newWriteBudget(r.Options.WriteBytesPerSecond, r.Options.Interval)
	apps, err := indexApplications(ctx, mgr.GetCache())
	if err != nil {
		return fmt.Errorf("index applications by applicationset: %w", err)
	}
	r.apps = apps
	queue, err := reconcilequeue.Options(controller.Options{MaxConcurrentReconciles: max(r.Options.Workers, 1)})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&argocd.Application{}, r.applicationHandler(), builder.WithPredicates(reportChanged())).
		Watches(newAppSetMetadata(), r.selfHandler(), builder.OnlyMetadata, builder.WithPredicates(appSetChanged())).
		Watches(&v1alpha1.MulticlusterApplicationSetReport{}, r.selfHandler()).
		WithOptions(queue).
		Complete(r)
}

// Reconcile brings the report of one ApplicationSet (the request names both) in step with its Applications.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// A report whose write the budget put off is evaluated when the write is due, not at every interval before:
	// during a rollout of thousands of Applications the evaluations of large reports, each reading every
	// Application of the ApplicationSet, were a fifth of the controller's CPU, most of them spent on states that
	// were never written.
	if wait := r.budget.pending(req.NamespacedName, r.clock()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if wait := r.coalesce.begin(req.NamespacedName, r.clock()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	evaluations.Inc()
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("applicationSet", klog.KRef(req.Namespace, req.Name)))

	appSet, err := r.getAppSet(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	var apps []Observed
	memo := r.memos.get(req.NamespacedName)
	if appSet != nil {
		if apps, err = r.observeApplications(ctx, req.NamespacedName, memo); err != nil {
			return ctrl.Result{}, err
		}
	}
	current, err := r.getReport(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(apps) == 0 {
		// The ApplicationSet is gone, going, or has no pull-model Application: no report.
		r.budget.forget(req.NamespacedName)
		r.memos.forget(req.NamespacedName)
		return ctrl.Result{}, r.deleteReport(ctx, current)
	}
	desired := newReport(appSet)
	refs, omitted := memo.resources(r.Options.Limits.MaxResources)
	desired.Statuses = statuses(apps, refs, omitted, r.Options.Limits)
	return r.writeReport(ctx, current, desired)
}

// getAppSet returns the ApplicationSet's metadata, or nil when it does not exist or is being deleted.
func (r *Reconciler) getAppSet(ctx context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error) {
	appSet := newAppSetMetadata()
	if err := r.Client.Get(ctx, key, appSet); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get applicationset %s: %w", key, err)
	}
	if !appSet.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return appSet, nil
}

// observeApplications reads the state of the ApplicationSet's pull-model Applications from the cache; the
// memo observes again only those that changed since its last evaluation.
func (r *Reconciler) observeApplications(ctx context.Context, key types.NamespacedName, memo *memo) ([]Observed, error) {
	// The cached objects are only read: no copy of thousands of Applications per evaluation.
	objs, err := r.apps.ByIndex(indexAppSet, key.String())
	if err != nil {
		return nil, fmt.Errorf("list applications of applicationset %s: %w", key, err)
	}
	apps := make([]*argocd.Application, 0, len(objs))
	for _, obj := range objs {
		if app, ok := obj.(*argocd.Application); ok {
			apps = append(apps, app)
		}
	}
	return memo.observe(apps), nil
}

func (r *Reconciler) getReport(ctx context.Context, key types.NamespacedName) (*v1alpha1.MulticlusterApplicationSetReport, error) {
	report := &v1alpha1.MulticlusterApplicationSetReport{}
	if err := r.Client.Get(ctx, key, report); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get multiclusterapplicationsetreport %s: %w", key, err)
	}
	return report, nil
}

// deleteReport deletes the report, if there is one.
func (r *Reconciler) deleteReport(ctx context.Context, report *v1alpha1.MulticlusterApplicationSetReport) error {
	if report == nil {
		return nil
	}
	err := r.Client.Delete(ctx, report, client.Preconditions{UID: &report.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone already, or replaced by a new report that the next evaluation judges.
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete multiclusterapplicationsetreport %s: %w", klog.KObj(report), err)
	}
	writes.WithLabelValues("delete").Inc()
	log.FromContext(ctx).Info("Deleted report")
	return nil
}

// writeReport writes the desired report when it differs from the current one and the write budget has room
// for it; otherwise it asks to be evaluated again when the budget has. A new report is created; an existing
// one is updated from the cached copy, with the cached resourceVersion as precondition, keeping what others
// set on it (labels, annotations, owners) and replacing the statuses. An update costs the hub apiserver a third
// less CPU than a server-side apply of the same report, whose body it parses as YAML, twice with the default
// field validation (BenchmarkReportWriteAPIServerCPU); the field validation is off, as the body is encoded from
// the typed report and has no field the schema does not know.
func (r *Reconciler) writeReport(ctx context.Context, current, desired *v1alpha1.MulticlusterApplicationSetReport) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: desired.Namespace, Name: desired.Name}
	if upToDate(current, desired) {
		r.budget.forget(key)
		return ctrl.Result{}, nil
	}
	body := writeBody(current, desired)
	data, err := json.Marshal(body)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("encode multiclusterapplicationsetreport %s: %w", klog.KObj(desired), err)
	}
	if wait := r.budget.take(key, len(data), r.clock()); wait > 0 {
		log.FromContext(ctx).V(1).Info("Report write put off by the write budget", "after", wait, "bytes", len(data))
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	req, operation := writeRequest(r.rest, current, desired, data)
	err = req.Do(ctx).Error()
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// The cache is behind the report (or someone else wrote it): evaluate again once it has caught up.
		log.FromContext(ctx).V(1).Info("Report changed since it was cached; evaluating it again", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("%s multiclusterapplicationsetreport %s: %w", operation, klog.KObj(desired), err)
	}
	writes.WithLabelValues(operation).Inc()
	return ctrl.Result{}, nil
}

// writeRequest is the request that writes data, the encoded body of the desired report: a create when there
// is no current report, an update otherwise; named by its operation.
func writeRequest(rc rest.Interface, current, desired *v1alpha1.MulticlusterApplicationSetReport, data []byte) (*rest.Request, string) {
	operation, req := "update", rc.Put().Name(desired.Name)
	if current == nil {
		operation, req = "create", rc.Post()
	}
	// The apiserver answers with the metadata alone: nothing reads the answer.
	return req.Namespace(desired.Namespace).Resource(resource).
		Param("fieldManager", FieldOwner).Param("fieldValidation", metav1.FieldValidationIgnore).
		SetHeader("Content-Type", runtime.ContentTypeJSON).SetHeader("Accept", metadataOnly).
		Body(data), operation
}

const (
	// resource is the reports' resource, in the API group and version of the reconciler's REST client.
	resource = "multiclusterapplicationsetreports"
	// metadataOnly asks the apiserver to answer a write with the object's metadata alone.
	metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	// conflictRetry is how long after a write that found the report changed since it was cached the report is
	// evaluated again.
	conflictRetry = time.Second
)

// writeBody is the object a write of the desired report sends: the desired report when there is none yet;
// otherwise the current one (a copy from the cache, without managed fields, which the apiserver then keeps) with
// the desired label, owner and statuses.
func writeBody(current, desired *v1alpha1.MulticlusterApplicationSetReport) *v1alpha1.MulticlusterApplicationSetReport {
	if current == nil {
		return desired
	}
	body := *current
	body.TypeMeta = desired.TypeMeta
	body.ManagedFields = nil
	body.Labels = make(map[string]string, len(current.Labels)+len(desired.Labels))
	maps.Copy(body.Labels, current.Labels)
	maps.Copy(body.Labels, desired.Labels)
	body.OwnerReferences = slices.Clone(current.OwnerReferences)
	for _, want := range desired.OwnerReferences {
		if !slices.ContainsFunc(body.OwnerReferences, func(ref metav1.OwnerReference) bool { return sameOwner(ref, want) }) {
			body.OwnerReferences = append(body.OwnerReferences, want)
		}
	}
	body.Statuses = desired.Statuses
	return &body
}

// newRESTClient returns a client of the reports' API group and version that sends and receives raw JSON.
func newRESTClient(cfg *rest.Config, httpClient *http.Client) (rest.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	// The codecs decode the apiserver's error statuses; bodies are encoded and answers read by the caller.
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("client of %s: %w", v1alpha1.GroupVersion, err)
	}
	return c, nil
}

// sameOwner reports whether two owner references name the same owner.
func sameOwner(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.Kind == b.Kind && a.Name == b.Name && a.APIVersion == b.APIVersion
}

// upToDate reports whether the current report already has the desired label, owner and statuses.
func upToDate(current, desired *v1alpha1.MulticlusterApplicationSetReport) bool {
	if current == nil {
		return false
	}
	for k, v := range desired.Labels {
		if current.Labels[k] != v {
			return false
		}
	}
	for _, want := range desired.OwnerReferences {
		if !slices.ContainsFunc(current.OwnerReferences, func(ref metav1.OwnerReference) bool { return sameOwner(ref, want) }) {
			return false
		}
	}
	return equality.Semantic.DeepEqual(current.Statuses, desired.Statuses)
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}
