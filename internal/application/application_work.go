package application

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// annotationPrefix is the prefix of argocd-pull's own annotations.
const annotationPrefix = "argocd-pull.io/"

// Annotations argocd-pull sets on the works it writes.
const (
	// AnnotationSpecHash holds a hash of everything argocd-pull puts in a work, so that an unchanged work is
	// never written again.
	AnnotationSpecHash = "argocd-pull.io/spec-hash"
	// AnnotationOperationBaseline holds the startedAt of the managed cluster's last operation when a hub
	// .operation was first delivered, so that the operation the hub asked for can be told apart from an
	// earlier identical one.
	AnnotationOperationBaseline = "argocd-pull.io/operation-baseline"
	// AnnotationBuiltFrom holds a digest of what the work was built from (builtFrom): a controller that finds
	// it unchanged knows the work is what building it again would give, without building it.
	AnnotationBuiltFrom = "argocd-pull.io/built-from"
)

// MaxWorkBytes is the largest work argocd-pull writes: below the kube-apiserver's request limit and etcd's
// 1.5 MiB object limit, with room for the status the agent adds.
const MaxWorkBytes = 512 * 1024

// BuildOptions are the inputs of BuildWork that do not come from the Application.
type BuildOptions struct {
	// Cluster is the managed cluster (the namespace of the work on the hub).
	Cluster string
	// WorkName overrides the work's name: an existing work of the Application, for example one written by the
	// earlier OCM pull controller, is taken over under its own name.
	WorkName string
	// SpokeArgoCDNamespace is the namespace Argo CD runs in on the managed clusters. An Application delivered
	// to another namespace is preceded by that Namespace; a non-default AppProject is delivered into it.
	SpokeArgoCDNamespace string
	// AppProject is the hub AppProject of the Application when it is not "default".
	AppProject *unstructured.Unstructured
	// OperationBaseline is carried over from the current work (see AnnotationOperationBaseline).
	OperationBaseline string
}

// InvalidApplicationError is an Application that cannot be delivered as written; retrying does not help.
type InvalidApplicationError struct{ Reason string }

func (e *InvalidApplicationError) Error() string { return e.Reason }

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// WorkName returns the name of the work for a hub Application: readable, at most 63 characters, and unique
// per hub Application because it ends with a hash of the Application's namespace and name.
func WorkName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := hex.EncodeToString(sum[:])[:10]
	prefix := strings.ToLower(namespace + "-" + name)
	prefix = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, prefix)
	if max := validation.DNS1123LabelMaxLength - len(suffix) - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.Trim(prefix, "-")
	if prefix == "" {
		return suffix
	}
	return prefix + "-" + suffix
}

// SpokeNamespace returns the namespace of the Application on the managed cluster.
func SpokeNamespace(app metav1.Object) (string, error) {
	ns, ok := app.GetAnnotations()[argocd.AnnotationAppNamespace]
	if !ok {
		return app.GetNamespace(), nil
	}
	ns = strings.TrimSpace(ns)
	if !dns1123Label.MatchString(ns) || len(ns) > validation.DNS1123LabelMaxLength {
		return "", &InvalidApplicationError{Reason: fmt.Sprintf(
			"annotation %s=%q is not a valid namespace name", argocd.AnnotationAppNamespace, ns)}
	}
	return ns, nil
}

// BuildWork wraps a hub Application into the ManifestWork that delivers it to its managed cluster.
func BuildWork(app *unstructured.Unstructured, opts BuildOptions) (*workv1.ManifestWork, error) {
	spokeNS, err := SpokeNamespace(app)
	if err != nil {
		return nil, err
	}
	baseline := ""
	if app.Object["operation"] != nil {
		baseline = opts.OperationBaseline
	}
	payload, err := spokeApplication(app, spokeNS, baseline)
	if err != nil {
		return nil, err
	}

	manifests, orphans, err := workManifests(payload, spokeNS, opts)
	if err != nil {
		return nil, err
	}
	name := opts.WorkName
	if name == "" {
		name = WorkName(app.GetNamespace(), app.GetName())
	}
	work := &workv1.ManifestWork{
		TypeMeta: metav1.TypeMeta{APIVersion: workv1.GroupVersion.String(), Kind: "ManifestWork"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   opts.Cluster,
			Labels:      map[string]string{argocd.LabelPull: "true"},
			Annotations: map[string]string{argocd.AnnotationHubAppNamespace: app.GetNamespace(), argocd.AnnotationHubAppName: app.GetName()},
		},
		Spec: workv1.ManifestWorkSpec{
			Workload: workv1.ManifestsTemplate{Manifests: manifests},
			DeleteOption: &workv1.DeleteOption{
				PropagationPolicy: workv1.DeletePropagationPolicyTypeSelectivelyOrphan,
				SelectivelyOrphan: &workv1.SelectivelyOrphan{OrphaningRules: orphans},
			},
			ManifestConfigs: []workv1.ManifestConfigOption{applicationConfig(spokeNS, app.GetName())},
		},
	}
	if appSet := argocd.OwningAppSet(app); appSet != "" {
		work.Labels[argocd.LabelAppSet] = "true"
		work.Annotations[argocd.AnnotationHostingAppSet] = app.GetNamespace() + "/" + appSet
	}
	if opts.OperationBaseline != "" && app.Object["operation"] != nil {
		work.Annotations[AnnotationOperationBaseline] = opts.OperationBaseline
	}
	hash, size, err := specHash(work)
	if err != nil {
		return nil, err
	}
	if size > MaxWorkBytes {
		return nil, &InvalidApplicationError{Reason: fmt.Sprintf(
			"the Application is too large to deliver: its work would be %d bytes, the limit is %d", size, MaxWorkBytes)}
	}
	work.Annotations[AnnotationSpecHash] = hash
	return work, nil
}

// workManifests returns the work's manifests: the spoke Application's namespace when it is not Argo CD's own, its
// AppProject when the hub has one to copy, and the Application; the namespace and the AppProject are orphaned
// when the work goes (other Applications may use them).
func workManifests(payload *unstructured.Unstructured, spokeNS string, opts BuildOptions) ([]workv1.Manifest, []workv1.OrphaningRule, error) {
	objects := []*unstructured.Unstructured{}
	var orphans []workv1.OrphaningRule
	if spokeNS != opts.SpokeArgoCDNamespace {
		objects = append(objects, namespaceObject(spokeNS))
		orphans = append(orphans, workv1.OrphaningRule{Resource: "namespaces", Name: spokeNS})
	}
	if opts.AppProject != nil {
		proj := spokeAppProject(opts.AppProject, opts.SpokeArgoCDNamespace)
		objects = append(objects, proj)
		orphans = append(orphans, workv1.OrphaningRule{
			Group: argocd.Group, Resource: "appprojects", Namespace: proj.GetNamespace(), Name: proj.GetName(),
		})
	}
	objects = append(objects, payload)
	manifests := make([]workv1.Manifest, len(objects))
	for i, o := range objects {
		var err error
		if manifests[i], err = manifest(o); err != nil {
			return nil, nil, err
		}
	}
	return manifests, orphans, nil
}

// applicationConfig is how the agent treats the spoke Application: the status feedback it watches, and a
// forced server-side apply that leaves the spoke's own removal of .operation alone.
func applicationConfig(spokeNS, name string) workv1.ManifestConfigOption {
	return workv1.ManifestConfigOption{
		ResourceIdentifier: workv1.ResourceIdentifier{
			Group: argocd.Group, Resource: "applications", Namespace: spokeNS, Name: name,
		},
		FeedbackRules:      appstatus.FeedbackRules(),
		FeedbackScrapeType: workv1.FeedbackWatchType,
		UpdateStrategy: &workv1.UpdateStrategy{
			Type: workv1.UpdateStrategyTypeServerSideApply,
			ServerSideApply: &workv1.ServerSideApplyConfig{
				Force:        true,
				FieldManager: workv1.DefaultFieldManager,
				// Argo CD on the managed cluster removes .operation when it has run it; the agent must not
				// put it back. A new .operation from the hub changes the manifest and is applied.
				IgnoreFields: []workv1.IgnoreField{{
					Condition: workv1.IgnoreFieldsConditionOnSpokeChange,
					JSONPaths: []string{".operation"},
				}},
			},
		},
	}
}

// markedOperation returns the operation with argocd-pull's marker in its info (see
// appstatus.OperationMarkerInfo).
func markedOperation(op map[string]any, baseline string) map[string]any {
	out := runtime.DeepCopyJSONValue(op).(map[string]any)
	var info []any
	if existing, ok := out["info"].([]any); ok {
		for _, i := range existing {
			if m, ok := i.(map[string]any); ok && m["name"] == appstatus.OperationMarkerInfo {
				continue
			}
			info = append(info, i)
		}
	}
	out["info"] = append(info, map[string]any{"name": appstatus.OperationMarkerInfo, "value": OperationMarker(op, baseline)})
	return out
}

// spokeApplication returns the Application as the managed cluster gets it.
func spokeApplication(app *unstructured.Unstructured, spokeNS, baseline string) (*unstructured.Unstructured, error) {
	spec, ok := app.Object["spec"].(map[string]any)
	if !ok {
		return nil, &InvalidApplicationError{Reason: "the Application has no spec"}
	}
	spec = runtime.DeepCopyJSONValue(spec).(map[string]any)
	dest, _ := spec["destination"].(map[string]any)
	if dest == nil {
		dest = map[string]any{}
	}
	annotations := app.GetAnnotations()
	switch {
	case strings.TrimSpace(annotations[argocd.AnnotationDestinationServer]) != "":
		dest["server"] = strings.TrimSpace(annotations[argocd.AnnotationDestinationServer])
		delete(dest, "name")
	case strings.TrimSpace(annotations[argocd.AnnotationDestinationName]) != "":
		dest["name"] = strings.TrimSpace(annotations[argocd.AnnotationDestinationName])
		delete(dest, "server")
	default:
		dest["server"] = argocd.InClusterServer
		delete(dest, "name")
	}
	spec["destination"] = dest

	out := argocd.NewApplication()
	out.SetName(app.GetName())
	out.SetNamespace(spokeNS)
	out.SetFinalizers(spokeFinalizers(app.GetFinalizers()))
	out.Object["spec"] = spec
	if op, ok := app.Object["operation"].(map[string]any); ok {
		out.Object["operation"] = markedOperation(op, baseline)
	}

	labels := map[string]string{}
	for k, v := range app.GetLabels() {
		if k != argocd.LabelPull {
			labels[k] = v
		}
	}
	out.SetLabels(labels)
	drop := map[string]bool{
		argocd.AnnotationManagedCluster:    true,
		argocd.AnnotationAppNamespace:      true,
		argocd.AnnotationSkipReconcile:     true,
		argocd.AnnotationDestinationName:   true,
		argocd.AnnotationDestinationServer: true,
		corev1.LastAppliedConfigAnnotation: true,
	}
	if _, ok := spec["sourceHydrator"]; !ok {
		// Without a source hydrator the annotation means nothing on the managed cluster.
		drop[argocd.AnnotationHydrate] = true
	}
	kept := map[string]string{}
	for k, v := range annotations {
		// argocd-pull's own annotations are about the hub copy (the cache's status hash among them).
		if !drop[k] && !strings.HasPrefix(k, annotationPrefix) {
			kept[k] = v
		}
	}
	if appSet := argocd.OwningAppSet(app); appSet != "" {
		labels[argocd.LabelAppSet] = "true"
		kept[argocd.AnnotationHostingAppSet] = app.GetNamespace() + "/" + appSet
		out.SetLabels(labels)
	}
	out.SetAnnotations(kept)
	return out, nil
}

// spokeFinalizers returns the finalizers the managed cluster's Application gets: Argo CD's own (the resources
// finalizer makes Argo CD delete what the Application deployed), never argocd-pull's hub-side one.
func spokeFinalizers(finalizers []string) []string {
	var out []string
	for _, f := range finalizers {
		if f != Finalizer {
			out = append(out, f)
		}
	}
	return out
}

func spokeAppProject(proj *unstructured.Unstructured, namespace string) *unstructured.Unstructured {
	out := argocd.NewAppProject()
	out.SetName(proj.GetName())
	out.SetNamespace(namespace)
	out.SetLabels(proj.GetLabels())
	if spec, ok := proj.Object["spec"]; ok {
		out.Object["spec"] = runtime.DeepCopyJSONValue(spec)
	}
	return out
}

func namespaceObject(name string) *unstructured.Unstructured {
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	return ns
}

// manifest is obj as a work's manifest: its JSON encoding (Raw), as a work read back from the hub or the server
// has it, and not the object. What the work goes through after it is built (its spec hash, the transport's
// copies and its encoding for the hub apiserver or the server) then copies and writes bytes, where an object is
// encoded again at each step.
func manifest(obj *unstructured.Unstructured) (workv1.Manifest, error) {
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return workv1.Manifest{}, fmt.Errorf("encode %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return workv1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}}, nil
}

// specHash hashes what argocd-pull decides about a work: its labels, annotations and spec.
func specHash(work *workv1.ManifestWork) (string, int, error) {
	hash, size, err := argocd.HashJSON(struct {
		Labels      map[string]string       `json:"labels"`
		Annotations map[string]string       `json:"annotations"`
		Spec        workv1.ManifestWorkSpec `json:"spec"`
	}{work.Labels, work.Annotations, work.Spec})
	if err != nil {
		return "", 0, fmt.Errorf("encode work %s: %w", work.Name, err)
	}
	return hash, size, nil
}
