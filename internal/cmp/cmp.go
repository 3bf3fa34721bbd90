// Package cmp is argocd-pull's Argo CD Config Management Plugin (`argocd-pull cmp generate`), the pull model's
// variant where managed clusters run no Argo CD. The hub's Argo CD reconciles the Application; its repo server
// hands the source to the plugin through argocd-cmp-server; the plugin renders it (plain YAML, Kustomize or
// Helm, with their Go libraries) and prints one ManifestWork per target cluster, which the hub's Argo CD applies
// to the hub and each cluster's OCM work agent applies to the cluster. The status feedback the agent returns
// makes the ManifestWork health check (HealthLua) tell Argo CD the truth about the cluster. It
// reads its input from the repo server's working directory and environment and writes to stdout only: it calls
// no API server.
package cmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/yaml"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// GenerateOptions are the flags of `argocd-pull cmp generate`.
type GenerateOptions struct {
	// Path is the source directory (argocd-cmp-server runs the command in it).
	Path string
	// ClusterScopedKinds extends the built-in table of cluster-scoped kinds ("Kind" or "Kind.group").
	ClusterScopedKinds []string
	// MaxManifestBytes is the largest total size of the manifests of one work.
	MaxManifestBytes int
	// ReadApplication reads the hub Application for its cluster annotation when TARGET_CLUSTER is not set.
	ReadApplication bool
	// Kubeconfig reaches the hub for ReadApplication (in-cluster config or $KUBECONFIG when empty).
	Kubeconfig string

	// Stdout receives the works; os.Stdout when nil.
	Stdout io.Writer
	// Getenv reads the environment; os.Getenv when nil.
	Getenv func(string) string
}

// NewGenerateOptions returns the defaults.
func NewGenerateOptions() *GenerateOptions {
	return &GenerateOptions{Path: ".", MaxManifestBytes: MaxManifestBytes, ReadApplication: true}
}

// AddFlags registers the flags.
func (o *GenerateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Path, "path", o.Path, "Source directory to render (argocd-cmp-server runs the plugin in the Application's path)")
	fs.StringSliceVar(&o.ClusterScopedKinds, "cluster-scoped-kinds", o.ClusterScopedKinds,
		"Cluster-scoped kinds besides Kubernetes' and OCM's own and the CRDs among the manifests, as Kind or Kind.group (comma-separated)")
	fs.IntVar(&o.MaxManifestBytes, "max-manifest-bytes", o.MaxManifestBytes, "Largest total size of the manifests of one ManifestWork (OCM's webhook limit)")
	fs.BoolVar(&o.ReadApplication, "read-application", o.ReadApplication,
		"Without TARGET_CLUSTER in the plugin env, read the hub Application's "+argocd.AnnotationManagedCluster+" annotation (needs get on applications)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub for --read-application (in-cluster config or $KUBECONFIG when empty)")
}

// Validate checks the flags.
func (o *GenerateOptions) Validate() error {
	var errs []error
	if o.Path == "" {
		errs = append(errs, errors.New("--path must not be empty"))
	}
	if o.MaxManifestBytes <= 0 {
		errs = append(errs, errors.New("--max-manifest-bytes must be positive"))
	}
	if _, err := NewKinds(o.ClusterScopedKinds); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-scoped-kinds: %w", err))
	}
	return errors.Join(errs...)
}

// Run renders the source and prints the ManifestWorks.
func (o *GenerateOptions) Run(ctx context.Context) error {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	out := o.Stdout
	if out == nil {
		out = os.Stdout
	}
	works, err := o.generate(ctx, getenv)
	if err != nil {
		return err
	}
	return WriteWorks(out, works)
}

func (o *GenerateOptions) generate(ctx context.Context, getenv func(string) string) ([]*workv1.ManifestWork, error) {
	kinds, err := NewKinds(o.ClusterScopedKinds)
	if err != nil {
		return nil, err
	}
	var readApp ApplicationReader
	if o.ReadApplication {
		readApp = o.readApplication
	}
	target, err := resolveTarget(ctx, getenv, readApp)
	if err != nil {
		return nil, err
	}
	typ := DetectSource(o.Path)
	releaseName := strings.TrimSpace(getenv(EnvHelmReleaseName))
	if releaseName == "" {
		releaseName = target.AppName
	}
	objs, err := Render(o.Path, typ, HelmOptions{
		ReleaseName: releaseName,
		Namespace:   target.Namespace,
		ValueFiles:  splitList(getenv(EnvHelmValues)),
		KubeVersion: strings.TrimSpace(getenv(EnvKubeVersion)),
		APIVersions: splitList(getenv(EnvAPIVersions)),
	})
	if err != nil {
		return nil, fmt.Errorf("render the %s source: %w", typ, err)
	}
	if objs, err = normalize(objs, kinds, target.Namespace); err != nil {
		return nil, err
	}
	return BuildWorks(objs, kinds, target, o.MaxManifestBytes)
}

// readApplication reads the hub Application with the plugin's own credentials.
func (o *GenerateOptions) readApplication(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load hub kubeconfig: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	gvr := schema.GroupVersionResource{Group: argocd.Group, Version: argocd.Version, Resource: "applications"}
	app, err := client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get application %s/%s: %w", namespace, name, err)
	}
	return app, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// WriteWorks prints works as a YAML stream, without the empty status and creation timestamp a typed object
// carries, so that what Argo CD applies is what it reads back.
func WriteWorks(w io.Writer, works []*workv1.ManifestWork) error {
	for i, work := range works {
		data, err := json.Marshal(work)
		if err != nil {
			return fmt.Errorf("encode work %s/%s: %w", work.Namespace, work.Name, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return fmt.Errorf("encode work %s/%s: %w", work.Namespace, work.Name, err)
		}
		delete(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		data, err = json.Marshal(u.Object)
		if err != nil {
			return fmt.Errorf("encode work %s/%s: %w", work.Namespace, work.Name, err)
		}
		out, err := yaml.JSONToYAML(data)
		if err != nil {
			return fmt.Errorf("encode work %s/%s: %w", work.Namespace, work.Name, err)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return nil
}
