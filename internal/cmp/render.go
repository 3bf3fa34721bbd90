package cmp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// SourceType is how a source directory is rendered.
type SourceType string

// Source types, detected as Argo CD detects them.
const (
	SourceDirectory SourceType = "Directory"
	SourceKustomize SourceType = "Kustomize"
	SourceHelm      SourceType = "Helm"
)

// kustomizationFiles are the file names kustomize recognises.
var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// DetectSource tells a Helm chart (Chart.yaml) from a Kustomize directory (a kustomization file) from a
// directory of plain manifests, the way Argo CD does for an Application's path.
func DetectSource(dir string) SourceType {
	if fileExists(filepath.Join(dir, "Chart.yaml")) {
		return SourceHelm
	}
	for _, f := range kustomizationFiles {
		if fileExists(filepath.Join(dir, f)) {
			return SourceKustomize
		}
	}
	return SourceDirectory
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}

// HelmOptions are the inputs of a Helm rendering that do not come from the chart.
type HelmOptions struct {
	// ReleaseName is the release's name (Argo CD uses the Application's name).
	ReleaseName string
	// Namespace is the release's namespace.
	Namespace string
	// ValueFiles are values files relative to the chart, merged in order (later ones win).
	ValueFiles []string
	// KubeVersion and APIVersions are the capabilities the templates see (Argo CD passes the destination's
	// as KUBE_VERSION and KUBE_API_VERSIONS).
	KubeVersion string
	APIVersions []string
}

// Render renders a source directory into Kubernetes objects, with Go libraries only: no helm, kustomize or
// kubectl binary is needed.
func Render(dir string, typ SourceType, helm HelmOptions) ([]Object, error) {
	switch typ {
	case SourceHelm:
		return renderHelm(dir, helm)
	case SourceKustomize:
		return renderKustomize(dir)
	default:
		return renderDirectory(dir)
	}
}

var manifestFile = regexp.MustCompile(`\.(yaml|yml|json)$`)

// renderDirectory reads every YAML and JSON file under dir, recursively, in lexical order. Hidden files and
// directories (.git, .argocd-source.yaml) and kustomization files are not manifests.
func renderDirectory(dir string) ([]Object, error) {
	var objs []Object
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() || !manifestFile.MatchString(name) || isKustomization(name) {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path) //nolint:gosec // G122: the walk stays under the source directory the plugin was given
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		docs, err := decodeDocuments(data, rel, false)
		if err != nil {
			return err
		}
		objs = append(objs, docs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return objs, nil
}

func isKustomization(name string) bool {
	for _, f := range kustomizationFiles {
		if name == f {
			return true
		}
	}
	return false
}

// renderKustomize builds a kustomization with kustomize's own library (what `kustomize build` runs), with its
// default options: files load from the kustomization's root and other kustomization directories only, and no
// plugins or functions run.
func renderKustomize(dir string) ([]Object, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		return nil, &ManifestError{Origin: "kustomize build", Reason: err.Error()}
	}
	var objs []Object
	for i, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, &ManifestError{Origin: fmt.Sprintf("kustomize build, resource %d", i+1), Reason: err.Error()}
		}
		u := &unstructured.Unstructured{Object: m}
		objs = append(objs, Object{Unstructured: u, Origin: fmt.Sprintf("kustomize build, resource %d", i+1)})
	}
	return objs, nil
}

// renderHelm renders a chart as `helm template` does, with Helm's own engine: the chart's values merged with the
// values files, the chart's crds/ first, then every template in name order (NOTES.txt and partials are not
// manifests; test hooks are not part of an installation).
func renderHelm(dir string, o HelmOptions) ([]Object, error) {
	if o.Namespace == "" {
		return nil, errors.New("a Helm chart needs a release namespace: set TARGET_NAMESPACE in the Application's plugin env")
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, &ManifestError{Origin: "Chart.yaml", Reason: "cannot load the chart: " + err.Error()}
	}
	if err := checkDependencies(ch); err != nil {
		return nil, err
	}
	vals := map[string]any{}
	for _, f := range o.ValueFiles {
		if filepath.IsAbs(f) {
			return nil, fmt.Errorf("values file %s: must be relative to the chart", f)
		}
		data, err := os.ReadFile(filepath.Join(dir, f)) //nolint:gosec // G304: a file of the Application's own source
		if err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
		}
		v, err := chartutil.ReadValues(data)
		if err != nil {
			return nil, &ManifestError{Origin: f, Reason: "cannot be parsed: " + err.Error()}
		}
		vals = mergeValues(vals, v)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return nil, &ManifestError{Origin: "Chart.yaml", Reason: "dependencies: " + err.Error()}
	}
	caps, err := capabilities(o)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: o.ReleaseName, Namespace: o.Namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, &ManifestError{Origin: "values", Reason: err.Error()}
	}
	rendered, err := engine.Render(ch, top)
	if err != nil {
		return nil, &ManifestError{Origin: "helm template", Reason: err.Error()}
	}

	var objs []Object
	for _, crd := range ch.CRDObjects() {
		docs, err := decodeDocuments(crd.File.Data, crd.Filename, true)
		if err != nil {
			return nil, err
		}
		objs = append(objs, docs...)
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(base, "_") || strings.TrimSpace(rendered[name]) == "" {
			continue
		}
		docs, err := decodeDocuments([]byte(rendered[name]), name, true)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if !isTestHook(d.Unstructured) {
				objs = append(objs, d)
			}
		}
	}
	return objs, nil
}

// checkDependencies fails on a dependency that is declared but not vendored into charts/: the plugin renders
// offline and does not download charts.
func checkDependencies(ch *chart.Chart) error {
	if ch.Metadata == nil {
		return nil
	}
	have := map[string]bool{}
	for _, d := range ch.Dependencies() {
		have[d.Name()] = true
	}
	var missing []string
	for _, d := range ch.Metadata.Dependencies {
		if !have[d.Name] {
			missing = append(missing, d.Name)
		}
	}
	if len(missing) > 0 {
		return &ManifestError{Origin: "Chart.yaml", Reason: fmt.Sprintf(
			"dependencies %s are not in charts/: the plugin does not download charts; run `helm dependency build` and commit charts/",
			strings.Join(missing, ", "))}
	}
	return nil
}

func capabilities(o HelmOptions) (*chartutil.Capabilities, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	if o.KubeVersion != "" {
		v := o.KubeVersion
		if !strings.HasPrefix(v, "v") {
			v = "v" + v
		}
		kv, err := chartutil.ParseKubeVersion(v)
		if err != nil {
			return nil, fmt.Errorf("KUBE_VERSION %q: %w", o.KubeVersion, err)
		}
		caps.KubeVersion = *kv
	}
	if len(o.APIVersions) > 0 {
		caps.APIVersions = append(chartutil.VersionSet(nil), caps.APIVersions...)
		caps.APIVersions = append(caps.APIVersions, o.APIVersions...)
	}
	return caps, nil
}

// isTestHook reports whether a rendered object is a Helm test hook, which `helm install` does not create.
func isTestHook(u *unstructured.Unstructured) bool {
	for _, h := range strings.Split(u.GetAnnotations()["helm.sh/hook"], ",") {
		switch strings.TrimSpace(h) {
		case "test", "test-success", "test-failure":
			return true
		}
	}
	return false
}

// mergeValues merges b into a as Helm merges values files: maps merge recursively, anything else in b wins.
func mergeValues(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
