package version

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"

	var line bytes.Buffer
	if err := (&Options{Out: &line}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "argocd-pull v1.2.3 (revision 0123456789abcdef0123456789abcdef01234567, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if line.String() != want {
		t.Errorf("version printed %q, want %q", line.String(), want)
	}

	var js bytes.Buffer
	if err := (&Options{Output: "json", Out: &js}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got Info
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("version -o json printed %q: %v", js.String(), err)
	}
	if got.Version != "v1.2.3" || got.Revision != Revision || got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version -o json: %+v", got)
	}
}

func TestGetWithoutLinkerValues(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "", ""
	got := Get()
	if got.Version == "" || got.Revision == "" {
		t.Errorf("Get without linker values left fields empty: %+v", got)
	}
}

func TestValidate(t *testing.T) {
	if err := (&Options{Output: "yaml"}).Validate(); err == nil || !strings.Contains(err.Error(), "yaml") {
		t.Errorf("Validate accepted --output yaml (err %v)", err)
	}
	if err := (&Options{Output: "json"}).Validate(); err != nil {
		t.Errorf("Validate refused --output json: %v", err)
	}
}
