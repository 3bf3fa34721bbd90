package loopback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
)

// Pinned versions of the modules whose CRDs the test environment loads. They are read from the Go module
// cache, never copied into this repository.
const (
	ArgoCDModule    = "github.com/argoproj/argo-cd/v3"
	ArgoCDVersion   = "v3.2.11"
	OCMAPIModule    = "open-cluster-management.io/api"
	OCMAPIVersion   = "v1.3.0"
	argoCDCRDSubdir = "manifests/crds"
)

// CRDSet names a group of CRDs to install.
type CRDSet string

const (
	// ArgoCDCRDs are Application, ApplicationSet and AppProject.
	ArgoCDCRDs CRDSet = "argocd"
	// OCMHubCRDs are the OCM cluster, placement, work and addon CRDs a hub has.
	OCMHubCRDs CRDSet = "ocm-hub"
	// OCMSpokeCRDs are the CRDs the work agent needs on a managed cluster (AppliedManifestWork).
	OCMSpokeCRDs CRDSet = "ocm-spoke"
	// ProjectCRDs are argocd-pull's own CRDs, generated into config/crd.
	ProjectCRDs CRDSet = "argocd-pull"
)

var ocmHubCRDFiles = []string{
	"cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml",
	"cluster/v1alpha1/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml",
	"cluster/v1alpha1/0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml",
	"cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml",
	"cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml",
	"cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml",
	"cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
	"work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
	"work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml",
	"addon/v1beta1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
	"addon/v1beta1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
	"addon/v1beta1/0000_02_addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml",
	"addon/v1alpha1/0000_03_addon.open-cluster-management.io_addontemplates.crd.yaml",
}

var ocmSpokeCRDFiles = []string{
	"work/v1/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml",
}

var argoCDCRDFiles = []string{
	"application-crd.yaml",
	"applicationset-crd.yaml",
	"appproject-crd.yaml",
}

// CRDFiles returns the paths of the CRD files of a set, downloading the module into the cache if needed.
func CRDFiles(set CRDSet) ([]string, error) {
	var mod, version, sub string
	var files []string
	switch set {
	case ArgoCDCRDs:
		mod, version, sub, files = ArgoCDModule, ArgoCDVersion, argoCDCRDSubdir, argoCDCRDFiles
	case OCMHubCRDs:
		mod, version, files = OCMAPIModule, OCMAPIVersion, ocmHubCRDFiles
	case OCMSpokeCRDs:
		mod, version, files = OCMAPIModule, OCMAPIVersion, ocmSpokeCRDFiles
	case ProjectCRDs:
		root, err := ModuleRoot()
		if err != nil {
			return nil, err
		}
		return filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	default:
		return nil, fmt.Errorf("unknown CRD set %q", set)
	}
	dir, err := ModuleDir(mod, version)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(files))
	for _, f := range files {
		paths = append(paths, filepath.Join(dir, sub, f))
	}
	return paths, nil
}

var (
	moduleDirsMu sync.Mutex
	moduleDirs   = map[string]string{}
)

// ModuleDir returns the directory of a module version in the Go module cache (`go mod download -json`).
func ModuleDir(module, version string) (string, error) {
	key := module + "@" + version
	moduleDirsMu.Lock()
	defer moduleDirsMu.Unlock()
	if dir, ok := moduleDirs[key]; ok {
		return dir, nil
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("go", "mod", "download", "-json", key) //nolint:gosec // a pinned module version
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Run outside any module so that this repository's go.mod does not matter.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s%s", key, err, stderr.String(), stdout.String())
	}
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return "", fmt.Errorf("decode go mod download %s: %w", key, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", key, info.Error)
	}
	moduleDirs[key] = info.Dir
	return info.Dir, nil
}

// InstallCRDs creates the CRDs in the given files and waits until they are established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, files []string) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	var names []string
	for _, path := range files {
		crds, err := readCRDs(path)
		if err != nil {
			return err
		}
		for _, crd := range crds {
			_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create crd %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		err := waitFor(ctx, "crd "+name+" to be established", 50*time.Millisecond, nil, func(ctx context.Context) error {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return errors.New("not established yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func readCRDs(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	f, err := os.Open(path) //nolint:gosec // CRD files from the module cache
	if err != nil {
		return nil, fmt.Errorf("open crd file: %w", err)
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*apiextensionsv1.CustomResourceDefinition
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		if crd.Kind == "CustomResourceDefinition" {
			out = append(out, crd)
		}
	}
}
