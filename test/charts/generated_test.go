package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// TestChartCopiesMatchConfig: the hub chart's CRDs and the controller's rules are config/'s, which controller-gen
// generates (make generate copies them; make verify fails on a difference too). A CRD or rule added to config/
// and not to the chart, or edited in one place only, fails here.
func TestChartCopiesMatchConfig(t *testing.T) {
	configCRDs, err := filepath.Glob("../../config/crd/*.yaml")
	if err != nil || len(configCRDs) == 0 {
		t.Fatalf("no CRDs in config/crd: %v", err)
	}
	chartCRDs, err := filepath.Glob(hubChart + "/crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := baseNames(chartCRDs), baseNames(configCRDs); !slices.Equal(got, want) {
		t.Errorf("the hub chart's crds/ holds %v, config/crd holds %v: run make generate", got, want)
	}
	pairs := map[string]string{hubChart + "/files/controller-clusterrole.yaml": "../../config/rbac/role.yaml"}
	for _, f := range configCRDs {
		pairs[hubChart+"/crds/"+filepath.Base(f)] = f
	}
	for chartFile, configFile := range pairs {
		got, err := os.ReadFile(chartFile) //nolint:gosec // files of this repository
		if err != nil {
			t.Errorf("read %s: %v (run make generate)", chartFile, err)
			continue
		}
		want, err := os.ReadFile(configFile) //nolint:gosec // files of this repository
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: run make generate", chartFile, configFile)
		}
	}
}

func baseNames(paths []string) []string {
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	sort.Strings(names)
	return names
}
