package appsetreport

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Argo CD's sync and health statuses and operation phases the report classifies by.
const (
	SyncSynced        = "Synced"
	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"
	HealthMissing     = "Missing"
	StatusUnknown     = "Unknown"
	PhaseRunning      = "Running"
	PhaseFailed       = "Failed"
	PhaseError        = "Error"
)

// Limits bound the size of a report; see docs/report.md.
type Limits struct {
	// MaxClusterConditions is the most entries clusterConditions holds. An ApplicationSet with at most this
	// many Applications has an entry for each; a larger one only for those that need attention.
	MaxClusterConditions int
	// MaxConditions is the most conditions one entry holds (errors first).
	MaxConditions int
	// MaxMessageLength is the most bytes of one message.
	MaxMessageLength int
	// MaxResources is the most entries resources holds.
	MaxResources int
	// MaxBytes bounds the encoded size of the report's statuses; entries are left out, least severe first,
	// until it fits.
	MaxBytes int
}

// DefaultLimits keep a report below a third of the API server's 1.5 MiB object limit.
func DefaultLimits() Limits {
	return Limits{MaxClusterConditions: 500, MaxConditions: 5, MaxMessageLength: 256, MaxResources: 500, MaxBytes: 512 << 10}
}

// Observed is the state of one Application as its status (full, or compacted by the cache) shows it.
type Observed struct {
	Namespace string
	Name      string
	// AppSet is the name of the ApplicationSet that owns the Application, in its namespace ("" if none).
	AppSet  string
	Cluster string

	Sync, Revision                                       string
	Health, HealthMessage                                string
	OperationPhase, OperationStartedAt, OperationMessage string
	Conditions                                           []v1alpha1.AppCondition

	// ResourceRefs are the encoded identities of the resources the Application deploys, and ResourceCount
	// their number when the cache kept only some (see application.CachedResourceRefs); only Applications from
	// the controller's cache have them.
	ResourceRefs  string
	ResourceCount int
}

// Observe reads the state of an Application from its status summary.
func Observe(app *argocd.Application) Observed {
	st := app.StatusSummary()
	o := Observed{
		Namespace: app.Namespace, Name: app.Name, AppSet: argocd.OwningAppSet(app), Cluster: argocd.ManagedCluster(app),
		Sync: st.Sync, Revision: st.Revision, Health: st.Health, HealthMessage: st.HealthMessage,
		OperationPhase: st.OperationPhase, OperationStartedAt: st.OperationStartedAt, OperationMessage: st.OperationMessage,
		ResourceRefs: st.Resources,
	}
	if st.ResourceCount > argocd.MaxResources {
		o.ResourceCount = st.ResourceCount
	}
	for _, c := range st.Conditions {
		if c.Type != "" || c.Message != "" {
			o.Conditions = append(o.Conditions, v1alpha1.AppCondition{Type: c.Type, Message: c.Message})
		}
	}
	return o
}

// Severity ranks of an Application: errors first, fine last.
const (
	severityError = iota
	severityWarning
	severityProgressing
	severityFine
)

func isError(c v1alpha1.AppCondition) bool { return strings.HasSuffix(c.Type, "Error") }

func (o *Observed) severity() int {
	failed := o.OperationPhase == PhaseFailed || o.OperationPhase == PhaseError
	if failed || o.Health == HealthDegraded || o.Health == HealthMissing || slices.ContainsFunc(o.Conditions, isError) {
		return severityError
	}
	if o.Sync != SyncSynced || (o.Health != HealthHealthy && o.Health != HealthProgressing) || len(o.Conditions) > 0 {
		return severityWarning
	}
	if o.Health == HealthProgressing || o.OperationPhase == PhaseRunning {
		return severityProgressing
	}
	return severityFine
}

// NeedsAttention reports whether the Application is anything but Synced and Healthy without conditions.
func (o *Observed) NeedsAttention() bool { return o.severity() != severityFine }

// StateMessage says why the Application is not Synced and Healthy, apart from its conditions: the message of a
// failed sync operation, or of its health when it is not Healthy.
func (o *Observed) StateMessage() string {
	if (o.OperationPhase == PhaseFailed || o.OperationPhase == PhaseError) && o.OperationMessage != "" {
		return o.OperationMessage
	}
	if o.Health != HealthHealthy && o.HealthMessage != "" {
		return o.HealthMessage
	}
	return ""
}

// Message is the one line that best says what is wrong with the Application: its first error condition, else
// StateMessage, else its first warning.
func (o *Observed) Message() string {
	for _, c := range o.Conditions {
		if isError(c) && c.Message != "" {
			return c.Message
		}
	}
	if m := o.StateMessage(); m != "" {
		return m
	}
	for _, c := range o.Conditions {
		if c.Message != "" {
			return c.Message
		}
	}
	return ""
}

// Counts are the numbers of Applications in each state.
type Counts struct {
	Applications, Clusters, Synced, NotSynced, Healthy, NotHealthy, InProgress int
}

// Count counts Applications the way ACM's report does: by sync status Synced or not, by health status Healthy
// or not, and Progressing as both notHealthy and inProgress. Clusters counts distinct clusters.
func Count(apps []Observed) Counts {
	var c Counts
	clusters := make(map[string]struct{}, len(apps))
	for i := range apps {
		o := &apps[i]
		c.Applications++
		if o.Cluster != "" {
			clusters[o.Cluster] = struct{}{}
		}
		if o.Sync == SyncSynced {
			c.Synced++
		} else {
			c.NotSynced++
		}
		switch o.Health {
		case HealthHealthy:
			c.Healthy++
		case HealthProgressing:
			c.InProgress++
			c.NotHealthy++
		default:
			c.NotHealthy++
		}
	}
	c.Clusters = len(clusters)
	return c
}

// Summary is the report's summary of the counts.
func (c Counts) Summary() v1alpha1.ReportSummary {
	s := v1alpha1.ReportSummary{
		Synced: strconv.Itoa(c.Synced), NotSynced: strconv.Itoa(c.NotSynced),
		Healthy: strconv.Itoa(c.Healthy), NotHealthy: strconv.Itoa(c.NotHealthy),
		InProgress: strconv.Itoa(c.InProgress), Clusters: strconv.Itoa(c.Clusters),
	}
	if c.Applications != c.Clusters {
		s.Applications = strconv.Itoa(c.Applications)
	}
	return s
}

// HostingAppSetLabel is the value of the report's hosting-applicationset label: "<namespace>.<name>" cut to
// 63 characters, as ACM writes it, and ending in an alphanumeric character as a label value must.
func HostingAppSetLabel(namespace, name string) string {
	v := fmt.Sprintf("%.63s", namespace+"."+name)
	return strings.TrimRightFunc(v, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	})
}

// Build returns the report of an ApplicationSet from the state of its Applications.
func Build(appSet *metav1.PartialObjectMetadata, apps []Observed, limits Limits) *v1alpha1.MulticlusterApplicationSetReport {
	report := newReport(appSet)
	report.Statuses = Statuses(apps, limits)
	return report
}

// newReport returns the report of an ApplicationSet without its statuses.
func newReport(appSet *metav1.PartialObjectMetadata) *v1alpha1.MulticlusterApplicationSetReport {
	report := &v1alpha1.MulticlusterApplicationSetReport{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "MulticlusterApplicationSetReport"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: appSet.Namespace,
			Name:      appSet.Name,
			Labels:    map[string]string{v1alpha1.LabelHostingAppSet: HostingAppSetLabel(appSet.Namespace, appSet.Name)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: argocd.ApplicationSetGVK.GroupVersion().String(), Kind: argocd.ApplicationSetGVK.Kind,
				Name: appSet.Name, UID: appSet.UID,
			}},
		},
	}
	return report
}

// Statuses computes a report's statuses: the summary, the resources, and the entries that fit the limits.
func Statuses(apps []Observed, limits Limits) v1alpha1.AppConditions {
	refs, omitted := resources(apps, limits.MaxResources)
	return statuses(apps, refs, omitted, limits)
}

// statuses computes a report's statuses with the resources given.
func statuses(apps []Observed, refs []v1alpha1.ResourceRef, omittedRefs int32, limits Limits) v1alpha1.AppConditions {
	out := v1alpha1.AppConditions{Summary: Count(apps).Summary(), Resources: refs, OmittedResources: omittedRefs}

	full := len(apps) <= limits.MaxClusterConditions
	candidates := make([]*Observed, 0, len(apps))
	for i := range apps {
		if full || apps[i].NeedsAttention() {
			candidates = append(candidates, &apps[i])
		}
	}
	slices.SortFunc(candidates, func(a, b *Observed) int {
		return cmp.Or(cmp.Compare(a.severity(), b.severity()), cmp.Compare(a.Cluster, b.Cluster),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	budget := limits.MaxBytes - argocd.JSONSize(out)
	for _, o := range candidates {
		// An entry is built only while the count has room: past it, Applications are only counted.
		if len(out.ClusterConditions) < limits.MaxClusterConditions {
			e := entry(o, limits)
			if size := argocd.JSONSize(e) + 1; size <= budget {
				budget -= size
				out.ClusterConditions = append(out.ClusterConditions, e)
				continue
			}
		}
		if o.NeedsAttention() {
			out.OmittedClusterConditions++
		}
	}
	slices.SortFunc(out.ClusterConditions, func(a, b v1alpha1.ClusterCondition) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.App, b.App))
	})
	return out
}

// entry is the report entry of one Application.
func entry(o *Observed, limits Limits) v1alpha1.ClusterCondition {
	e := v1alpha1.ClusterCondition{
		Cluster:                 o.Cluster,
		SyncStatus:              cmp.Or(o.Sync, StatusUnknown),
		HealthStatus:            cmp.Or(o.Health, StatusUnknown),
		OperationStateStartedAt: o.OperationStartedAt,
		OperationStatePhase:     o.OperationPhase,
		SyncRevision:            o.Revision,
		App:                     o.Namespace + "/" + o.Name + "/" + o.Cluster + "/" + application.WorkName(o.Namespace, o.Name),
		HubApplication:          o.Name,
	}
	conditions := slices.Clone(o.Conditions)
	slices.SortStableFunc(conditions, func(a, b v1alpha1.AppCondition) int {
		return -cmp.Compare(boolInt(isError(a)), boolInt(isError(b)))
	})
	if len(conditions) > limits.MaxConditions {
		conditions = conditions[:limits.MaxConditions]
	}
	for i := range conditions {
		conditions[i].Message = Truncate(conditions[i].Message, limits.MaxMessageLength)
	}
	if len(conditions) > 0 {
		e.Conditions = conditions
	}
	if m := o.StateMessage(); !slices.ContainsFunc(o.Conditions, func(c v1alpha1.AppCondition) bool { return c.Message == m }) {
		e.Message = Truncate(m, limits.MaxMessageLength)
	}
	return e
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resources returns the union of the resources the Applications deploy, sorted as ACM sorts them (name, then
// kind), cut to max, and how many were left out (including those beyond what the cache keeps per Application).
func resources(apps []Observed, maxResources int) ([]v1alpha1.ResourceRef, int32) {
	seen := map[string]struct{}{}
	set := map[v1alpha1.ResourceRef]struct{}{}
	beyondCache := 0
	for i := range apps {
		o := &apps[i]
		if o.ResourceRefs == "" {
			continue
		}
		if _, ok := seen[o.ResourceRefs]; !ok {
			seen[o.ResourceRefs] = struct{}{}
			refs := argocd.ParseResourceRefs(o.ResourceRefs)
			for _, r := range refs {
				set[reportRef(r)] = struct{}{}
			}
			beyondCache = max(beyondCache, o.ResourceCount-len(refs))
		}
	}
	out := make([]v1alpha1.ResourceRef, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	out, omitted := sortRefs(out, maxResources)
	return out, omitted + int32(beyondCache)
}

// reportRef is a resource as a report lists it.
func reportRef(r argocd.ResourceRef) v1alpha1.ResourceRef {
	apiVersion := r.Version
	if r.Group != "" {
		apiVersion = r.Group + "/" + r.Version
	}
	return v1alpha1.ResourceRef{APIVersion: apiVersion, Kind: r.Kind, Name: r.Name, Namespace: r.Namespace}
}

// sortRefs sorts distinct resources as ACM sorts them (name, then kind), cuts them to max, and returns how many
// were cut. Only what it keeps is sorted: an ApplicationSet's Applications can deploy thousands of resources, and
// sorting them all each time the set changed was the report controller's largest cost at 150,000 Applications.
// What it cuts is not kept either: a memo holds the result until the resources change, and a slice of the whole
// array kept every resource of the ApplicationSet (34 MB of the controller's live heap at 150,000).
func sortRefs(refs []v1alpha1.ResourceRef, maxResources int) ([]v1alpha1.ResourceRef, int32) {
	if len(refs) == 0 {
		return nil, 0
	}
	if len(refs) <= maxResources {
		slices.SortFunc(refs, compareRefs)
		return refs, 0
	}
	keep := max(maxResources, 0)
	selectFirst(refs, keep)
	kept := slices.Clone(refs[:keep])
	slices.SortFunc(kept, compareRefs)
	return kept, int32(len(refs) - keep)
}

// selectFirst moves the k first resources in compareRefs' order to the front of refs, in no particular order
// (quickselect, with the median of three as pivot).
func selectFirst(refs []v1alpha1.ResourceRef, k int) {
	lo, hi := 0, len(refs)-1
	for k > 0 && lo < hi {
		p := partitionRefs(refs, lo, hi)
		switch {
		case p == k-1:
			return
		case p < k-1:
			lo = p + 1
		default:
			hi = p - 1
		}
	}
}

// partitionRefs partitions refs[lo:hi+1] around a pivot and returns where the pivot ends: what is before it
// comes before it in compareRefs' order, what is after does not.
func partitionRefs(refs []v1alpha1.ResourceRef, lo, hi int) int {
	mid := lo + (hi-lo)/2
	if compareRefs(refs[mid], refs[lo]) < 0 {
		refs[mid], refs[lo] = refs[lo], refs[mid]
	}
	if compareRefs(refs[hi], refs[lo]) < 0 {
		refs[hi], refs[lo] = refs[lo], refs[hi]
	}
	if compareRefs(refs[mid], refs[hi]) < 0 {
		refs[mid], refs[hi] = refs[hi], refs[mid]
	}
	// refs[hi] is the median of the three: the pivot.
	p := lo
	for i := lo; i < hi; i++ {
		if compareRefs(refs[i], refs[hi]) < 0 {
			refs[i], refs[p] = refs[p], refs[i]
			p++
		}
	}
	refs[p], refs[hi] = refs[hi], refs[p]
	return p
}

// compareRefs orders resources as ACM's report does: by name, then kind, namespace and apiVersion.
func compareRefs(a, b v1alpha1.ResourceRef) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.APIVersion, b.APIVersion))
}

// Truncate cuts s to at most n bytes on a rune boundary, ending it with "..." when it was cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "..."
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
