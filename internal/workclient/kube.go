package workclient

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// FieldOwner is the server-side apply field manager of argocd-pull.
const FieldOwner = "argocd-pull"

// Kube is the basic-model transport: ManifestWork objects in the cluster namespaces of the hub, read through
// the manager's cache (only pull-model works are cached) and written with server-side apply.
type Kube struct {
	client   client.Client
	reader   client.Reader
	informer cache.Informer
}

var _ Client = (*Kube)(nil)

// KubeCacheOptions restricts the manager's cache of ManifestWorks to pull-model works.
func KubeCacheOptions() cache.ByObject {
	return cache.ByObject{Label: labels.SelectorFromSet(labels.Set{argocd.LabelPull: "true"})}
}

// NewKube returns the kube transport on a manager whose cache was built with KubeCacheOptions for ManifestWorks.
// It first adopts the works of the earlier OCM pull controller that lack the pull label (AdoptWorks).
func NewKube(ctx context.Context, mgr ctrl.Manager) (*Kube, error) {
	if err := AdoptWorks(ctx, mgr.GetAPIReader(), mgr.GetClient()); err != nil {
		return nil, err
	}
	err := mgr.GetFieldIndexer().IndexField(ctx, &workv1.ManifestWork{}, IndexApplication, func(o client.Object) []string {
		if key := ApplicationKey(o.(*workv1.ManifestWork)); key != "" {
			return []string{key}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index manifestworks by application: %w", err)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &workv1.ManifestWork{})
	if err != nil {
		return nil, fmt.Errorf("get manifestwork informer: %w", err)
	}
	return &Kube{client: mgr.GetClient(), reader: mgr.GetCache(), informer: inf}, nil
}

// Apply server-side applies the work's labels, annotations and spec.
func (k *Kube) Apply(ctx context.Context, work *workv1.ManifestWork) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(work)
	if err != nil {
		return fmt.Errorf("convert manifestwork %s/%s: %w", work.Namespace, work.Name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(workv1.GroupVersion.String())
	u.SetKind("ManifestWork")
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	err = k.client.Patch(ctx, u, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership) //nolint:staticcheck // SSA of an unstructured object
	if apierrors.IsNotFound(err) {
		return UnknownClusterError(work.Namespace, err)
	}
	if err != nil {
		return fmt.Errorf("apply manifestwork %s/%s: %w", work.Namespace, work.Name, err)
	}
	return nil
}

// Delete deletes the work; the work agent's finalizer keeps it until the applied resources are gone.
func (k *Kube) Delete(ctx context.Context, namespace, name string) error {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := k.client.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete manifestwork %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Get returns a work from the cache.
func (k *Kube) Get(ctx context.Context, namespace, name string) (*workv1.ManifestWork, error) {
	w := &workv1.ManifestWork{}
	if err := k.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, w); err != nil {
		return nil, err
	}
	return w, nil
}

// ListForApplication returns the cached works of a hub Application.
func (k *Kube) ListForApplication(ctx context.Context, appNamespace, appName string) ([]*workv1.ManifestWork, error) {
	list := &workv1.ManifestWorkList{}
	if err := k.reader.List(ctx, list, client.MatchingFields{IndexApplication: appNamespace + "/" + appName}); err != nil {
		return nil, fmt.Errorf("list manifestworks of application %s/%s: %w", appNamespace, appName, err)
	}
	out := make([]*workv1.ManifestWork, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// Informer returns the informer of the cached works.
func (k *Kube) Informer() cache.Informer { return k.informer }

// Ready reports whether the cache holds the works.
func (k *Kube) Ready(context.Context) error {
	if !k.informer.HasSynced() {
		return errors.New("the manifestwork cache is not synced yet")
	}
	return nil
}

// AdoptWorks labels with the pull label the works that stolostron's pull controller (Red Hat ACM's
// multicloud-integrations) wrote for ApplicationSet-generated Applications: those carry the
// application-set label and the hub-application annotations but not the pull label, so the cache would not hold
// them and their Applications would get a second work. Labelled, they are taken over like the others.
func AdoptWorks(ctx context.Context, reader client.Reader, writer client.Client) error {
	selector, err := labels.Parse(argocd.LabelAppSet + "=true,!" + argocd.LabelPull)
	if err != nil {
		return fmt.Errorf("parse adoption selector: %w", err)
	}
	adopted := 0
	opts := &client.ListOptions{LabelSelector: selector, Limit: 500}
	for {
		list := &workv1.ManifestWorkList{}
		if err := reader.List(ctx, list, opts); err != nil {
			return fmt.Errorf("list manifestworks of the earlier pull controller: %w", err)
		}
		for i := range list.Items {
			w := &list.Items[i]
			if w.Annotations[argocd.AnnotationHubAppNamespace] == "" || w.Annotations[argocd.AnnotationHubAppName] == "" {
				continue
			}
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+argocd.LabelPull+`":"true"}}}`))
			if err := writer.Patch(ctx, w, patch); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("label manifestwork %s/%s for takeover: %w", w.Namespace, w.Name, err)
			}
			adopted++
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	if adopted > 0 {
		klog.FromContext(ctx).Info("Adopted the works of the earlier pull controller", "works", adopted)
	}
	return nil
}
