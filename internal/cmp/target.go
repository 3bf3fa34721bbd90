package cmp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Environment variables Argo CD's repo server passes to a plugin's generate command.
const (
	EnvAppName      = "ARGOCD_APP_NAME"
	EnvAppNamespace = "ARGOCD_APP_NAMESPACE"
	EnvKubeVersion  = "KUBE_VERSION"
	EnvAPIVersions  = "KUBE_API_VERSIONS"
)

// The Application's plugin env (spec.source.plugin.env), which Argo CD passes with the prefix ARGOCD_ENV_.
const (
	// EnvTargetCluster names the managed cluster(s), comma-separated.
	EnvTargetCluster = "ARGOCD_ENV_TARGET_CLUSTER"
	// EnvTargetNamespace is the namespace of namespaced objects that have none (Argo CD's destination namespace).
	EnvTargetNamespace = "ARGOCD_ENV_TARGET_NAMESPACE"
	// EnvCreateNamespace ("true") adds the target namespace to the work.
	EnvCreateNamespace = "ARGOCD_ENV_CREATE_NAMESPACE"
	// EnvHelmValues lists values files, comma-separated, relative to the chart.
	EnvHelmValues = "ARGOCD_ENV_HELM_VALUES"
	// EnvHelmReleaseName overrides the release name (the Application's name by default).
	EnvHelmReleaseName = "ARGOCD_ENV_HELM_RELEASE_NAME"
)

var errNoTarget = errors.New("no target cluster: set TARGET_CLUSTER in the Application's plugin env " +
	"(spec.source.plugin.env), or the annotation " + argocd.AnnotationManagedCluster + " on the Application")

// ApplicationReader reads the hub Application the plugin renders for.
type ApplicationReader func(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error)

// resolveTarget works out where the manifests go. The plugin env's TARGET_CLUSTER wins (an ApplicationSet
// template sets it from the cluster generator or a Placement decision); without it, the hub Application's
// ocm-managed-cluster annotation, the pull model's own way of naming the cluster, read through readApp.
func resolveTarget(ctx context.Context, getenv func(string) string, readApp ApplicationReader) (Target, error) {
	t := Target{
		AppName:      strings.TrimSpace(getenv(EnvAppName)),
		AppNamespace: strings.TrimSpace(getenv(EnvAppNamespace)),
		Namespace:    strings.TrimSpace(getenv(EnvTargetNamespace)),
	}
	if t.AppName == "" {
		return t, fmt.Errorf("%s is not set: argocd-pull cmp generate runs as an Argo CD config management plugin, "+
			"which Argo CD's repo server calls with the Application's environment", EnvAppName)
	}
	if v := strings.TrimSpace(getenv(EnvCreateNamespace)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return t, fmt.Errorf("CREATE_NAMESPACE=%q: want true or false", v)
		}
		t.CreateNamespace = b
	}
	clusters, err := parseClusters(getenv(EnvTargetCluster), "TARGET_CLUSTER")
	if err != nil {
		return t, err
	}
	if len(clusters) == 0 {
		if readApp == nil {
			return t, errNoTarget
		}
		if t.AppNamespace == "" {
			return t, fmt.Errorf("%w (%s is not set, so the Application cannot be read)", errNoTarget, EnvAppNamespace)
		}
		app, err := readApp(ctx, t.AppNamespace, t.AppName)
		if err != nil {
			return t, fmt.Errorf("%w (reading the Application %s/%s: %v)", errNoTarget, t.AppNamespace, t.AppName, err)
		}
		if clusters, err = parseClusters(app.GetAnnotations()[argocd.AnnotationManagedCluster], "annotation "+argocd.AnnotationManagedCluster); err != nil {
			return t, err
		}
		if len(clusters) == 0 {
			return t, errNoTarget
		}
		if appSet := argocd.OwningAppSet(app); appSet != "" {
			t.AppSet = app.GetNamespace() + "/" + appSet
		}
		if t.Namespace == "" {
			t.Namespace, _, _ = unstructured.NestedString(app.Object, "spec", "destination", "namespace")
		}
	}
	t.Clusters = clusters
	if t.CreateNamespace && t.Namespace == "" {
		return t, errors.New("CREATE_NAMESPACE=true needs TARGET_NAMESPACE")
	}
	if t.Namespace != "" {
		if msgs := validation.IsDNS1123Label(t.Namespace); len(msgs) > 0 {
			return t, fmt.Errorf("target namespace %q: %s", t.Namespace, strings.Join(msgs, "; "))
		}
	}
	return t, nil
}

// parseClusters splits a comma-separated list of cluster names; each is the name of a namespace on the hub.
func parseClusters(v, what string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, c := range strings.Split(v, ",") {
		c = strings.TrimSpace(c)
		if c == "" || seen[c] {
			continue
		}
		if msgs := validation.IsDNS1123Label(c); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: cluster %q is not a valid cluster name: %s", what, c, strings.Join(msgs, "; "))
		}
		seen[c] = true
		out = append(out, c)
	}
	return out, nil
}
