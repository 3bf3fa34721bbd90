package cmp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Object is one rendered manifest and where it came from (a file, a document in it, a template), for errors.
type Object struct {
	*unstructured.Unstructured
	Origin string
}

func (o Object) describe() string {
	gvk := o.GroupVersionKind()
	what := gvk.Kind
	if gvk.Group != "" {
		what += "." + gvk.Group
	}
	if ns := o.GetNamespace(); ns != "" {
		what += " " + ns + "/" + o.GetName()
	} else {
		what += " " + o.GetName()
	}
	return what + " (" + o.Origin + ")"
}

// ManifestError is a rendered manifest that cannot be delivered as written.
type ManifestError struct {
	Origin string
	Reason string
}

func (e *ManifestError) Error() string { return e.Origin + ": " + e.Reason }

// decodeDocuments parses a YAML or JSON stream of documents. Lists (kind: List, or any *List with items) are
// flattened as kubectl and Argo CD do. strict is for rendered output (Helm templates, Kustomize): every
// document must be a Kubernetes object. In a plain directory, a file of another tool (values, configuration) sits
// next to the manifests; Argo CD skips such files, and so does this: a file whose documents have none of
// apiVersion, kind and metadata, or that does not parse and does not mention apiVersion, is skipped (no objects,
// no error).
// A document that has some of them but not apiVersion and kind is an error, not a silent skip.
func decodeDocuments(data []byte, origin string, strict bool) ([]Object, error) {
	var objs []Object
	dec := kubeyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 1; ; i++ {
		where := origin
		if i > 1 {
			where = fmt.Sprintf("%s, document %d", origin, i)
		}
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			if !strict && !bytes.Contains(data, []byte("apiVersion")) {
				return nil, nil
			}
			return nil, &ManifestError{Origin: fmt.Sprintf("%s, document %d", origin, i), Reason: "cannot be parsed: " + err.Error()}
		}
		if len(doc) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: doc}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			_, hasAPIVersion := doc["apiVersion"]
			_, hasKind := doc["kind"]
			_, hasMetadata := doc["metadata"]
			if !strict && !hasAPIVersion && !hasKind && !hasMetadata {
				return nil, nil
			}
			return nil, &ManifestError{Origin: where, Reason: "is not a Kubernetes object: apiVersion and kind are required"}
		}
		if items, isList := doc["items"]; isList && strings.HasSuffix(u.GetKind(), "List") {
			if items == nil {
				continue
			}
			list, ok := items.([]any)
			if !ok {
				return nil, &ManifestError{Origin: where, Reason: u.GetKind() + ": items is not a list"}
			}
			for j, item := range list {
				m, ok := item.(map[string]any)
				if !ok {
					return nil, &ManifestError{Origin: fmt.Sprintf("%s, item %d", where, j+1), Reason: "is not an object"}
				}
				objs = append(objs, Object{Unstructured: &unstructured.Unstructured{Object: m}, Origin: fmt.Sprintf("%s, item %d", where, j+1)})
			}
			continue
		}
		objs = append(objs, Object{Unstructured: u, Origin: where})
	}
}

// normalize checks the rendered objects and prepares them for a ManifestWork: every object has a name; a
// namespaced object without a namespace gets the target namespace or is an error; a cluster-scoped object
// loses a namespace it should not have; no object is rendered twice. The objects come back in the order the
// work agent should apply them (Argo CD's and Helm's kind order; the rendering order within a kind).
func normalize(objs []Object, kinds *Kinds, targetNamespace string) ([]Object, error) {
	if len(objs) == 0 {
		return nil, errors.New("the source rendered no manifests: a ManifestWork needs at least one")
	}
	for _, o := range objs {
		kinds.AddFromCRD(o.Unstructured)
	}
	var errs []error
	seen := map[string]string{}
	for _, o := range objs {
		if err := checkObject(o); err != nil {
			errs = append(errs, err)
			continue
		}
		gvk := o.GroupVersionKind()
		if kinds.ClusterScoped(gvk.GroupKind()) {
			if o.GetNamespace() != "" {
				unstructured.RemoveNestedField(o.Object, "metadata", "namespace")
			}
		} else if o.GetNamespace() == "" {
			if targetNamespace == "" {
				errs = append(errs, &ManifestError{Origin: o.describe(), Reason: fmt.Sprintf(
					"has no namespace: set metadata.namespace, or TARGET_NAMESPACE in the Application's plugin env; "+
						"if %s is cluster-scoped, name it in the plugin's --cluster-scoped-kinds", kindName(gvk.GroupKind()))})
				continue
			}
			o.SetNamespace(targetNamespace)
		}
		cleanMetadata(o.Unstructured)
		key := gvk.Group + "/" + gvk.Kind + "/" + o.GetNamespace() + "/" + o.GetName()
		if first, dup := seen[key]; dup {
			errs = append(errs, &ManifestError{Origin: o.describe(), Reason: "is rendered twice (first in " + first + ")"})
			continue
		}
		seen[key] = o.Origin
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sorted := append([]Object(nil), objs...)
	sort.SliceStable(sorted, func(i, j int) bool { return kindRank(sorted[i].GetKind()) < kindRank(sorted[j].GetKind()) })
	return sorted, nil
}

func checkObject(o Object) error {
	if _, err := schema.ParseGroupVersion(o.GetAPIVersion()); err != nil {
		return &ManifestError{Origin: o.Origin, Reason: fmt.Sprintf("apiVersion %q: %v", o.GetAPIVersion(), err)}
	}
	if o.GetGenerateName() != "" {
		return &ManifestError{Origin: o.describe(), Reason: "uses metadata.generateName, which a ManifestWork cannot apply: give it a name"}
	}
	if o.GetName() == "" {
		return &ManifestError{Origin: o.Origin, Reason: o.GetKind() + " has no metadata.name"}
	}
	return nil
}

// cleanMetadata removes what renderers leave behind that the apiserver would drop from the work, so that the
// work Argo CD applies equals the work it reads back (no endless OutOfSync).
func cleanMetadata(u *unstructured.Unstructured) {
	if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "creationTimestamp"); ok && v == nil {
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	}
	if s, ok := u.Object["status"].(map[string]any); ok && len(s) == 0 {
		delete(u.Object, "status")
	}
}

func kindName(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

// kindOrder is the order in which Argo CD (gitops-engine) and Helm create kinds; kinds not listed come after.
var kindOrder = []string{
	"Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
	"ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList",
	"Role", "RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController",
	"ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

var kindRanks = func() map[string]int {
	m := make(map[string]int, len(kindOrder))
	for i, k := range kindOrder {
		m[k] = i
	}
	return m
}()

func kindRank(kind string) int {
	if r, ok := kindRanks[kind]; ok {
		return r
	}
	return len(kindOrder)
}
