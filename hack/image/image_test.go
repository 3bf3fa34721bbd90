package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layoutEnv names an image layout built beforehand (`make test-image` passes bin/image, which `make image` just
// wrote); without it the test runs build.sh itself.
const layoutEnv = "IMAGE_LAYOUT"

// TestImage reads back the image `make image` builds: an OCI image index with a linux/amd64 and a linux/arm64
// image, each running the static binary of its platform as user 65532 with the CA bundle beside it and the OCI
// labels; then it runs the amd64 binary taken from its layer and checks that `argocd-pull version` prints the
// version and revision the labels carry (and the revision is this tree's commit).
func TestImage(t *testing.T) {
	dir := os.Getenv(layoutEnv)
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "image")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "./build.sh", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build.sh: %v\n%s", err, out)
		}
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	rootManifest, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rootManifest.Manifests) != 1 || rootManifest.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json should name one image index, got %+v", rootManifest.Manifests)
	}
	tag := rootManifest.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	idx, err := root.ImageIndex(rootManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	labels := manifest.Annotations
	revision := gitRevision(t)
	for key, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/argocd-pull/argocd-pull",
		"org.opencontainers.image.title":    "argocd-pull",
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.version":  tag,
	} {
		if labels[key] != want {
			t.Errorf("index annotation %s = %q, want %q", key, labels[key], want)
		}
	}
	if tag == "" || labels["org.opencontainers.image.description"] == "" || labels["org.opencontainers.image.created"] == "" {
		t.Errorf("the index lacks a tag, a description or a creation time: tag %q, annotations %v", tag, labels)
	}

	platforms := map[string]bool{}
	for _, desc := range manifest.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platform := desc.Platform.OS + "/" + desc.Platform.Architecture
		platforms[platform] = true
		t.Run(platform, func(t *testing.T) {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, img, desc.Platform, labels)
		})
	}
	if len(platforms) != 2 || !platforms["linux/amd64"] || !platforms["linux/arm64"] {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
}

// checkImage checks one platform's image: its configuration, its files, and (on amd64) its binary's version.
func checkImage(t *testing.T, img v1.Image, platform *v1.Platform, indexLabels map[string]string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != platform.OS || cf.Architecture != platform.Architecture {
		t.Errorf("config platform %s/%s, index says %s/%s", cf.OS, cf.Architecture, platform.OS, platform.Architecture)
	}
	if cf.Config.User != User {
		t.Errorf("user %q, want %q (non-root)", cf.Config.User, User)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != Entrypoint {
		t.Errorf("entrypoint %v, want [%s]", cf.Config.Entrypoint, Entrypoint)
	}
	for _, key := range []string{"org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		if cf.Config.Labels[key] == "" || cf.Config.Labels[key] != indexLabels[key] {
			t.Errorf("config label %s = %q, index says %q", key, cf.Config.Labels[key], indexLabels[key])
		}
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want 2 (base, binary)", len(layers))
	}
	files := readFiles(t, img)

	binary, ok := files[strings.TrimPrefix(Entrypoint, "/")]
	if !ok {
		t.Fatalf("no %s in the image", Entrypoint)
	}
	if binary.mode&0o111 == 0 {
		t.Errorf("%s is not executable (mode %o)", Entrypoint, binary.mode)
	}
	checkStaticELF(t, binary.data, platform.Architecture)
	bundle, ok := files[strings.TrimPrefix(CABundle, "/")]
	if !ok || !x509.NewCertPool().AppendCertsFromPEM(bundle.data) {
		t.Errorf("no CA bundle with certificates at %s", CABundle)
	}
	if passwd := string(files["etc/passwd"].data); !strings.Contains(passwd, ":65532:65532:") {
		t.Errorf("/etc/passwd does not name user 65532: %q", passwd)
	}
	if platform.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
		checkVersion(t, binary.data, platform, cf.Config.Labels)
	}
}

type imageFile struct {
	mode int64
	data []byte
}

// readFiles returns the regular files of the image's flattened file system.
func readFiles(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(hdr.Name, "/")] = imageFile{mode: hdr.Mode, data: data}
	}
}

// checkStaticELF: a Linux executable for the architecture, without a program interpreter (statically linked).
func checkStaticELF(t *testing.T, data []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the binary is not ELF: %v", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("binary machine %v, want %v for %s", f.Machine, machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: it is not static")
		}
	}
}

// checkVersion runs the binary from the layer and compares what `argocd-pull version -o json` prints with the
// image's labels.
func checkVersion(t *testing.T, binary []byte, platform *v1.Platform, labels map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "argocd-pull")
	if err := os.WriteFile(path, binary, 0o755); err != nil { //nolint:gosec // an executable to run
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version", "-o", "json").Output() //nolint:gosec // the binary from the image
	if err != nil {
		t.Fatalf("argocd-pull version: %v", err)
	}
	var info struct{ Version, Revision, Platform string }
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if info.Version != labels["org.opencontainers.image.version"] || info.Revision != labels["org.opencontainers.image.revision"] {
		t.Errorf("the binary says version %q revision %q; the labels say %q and %q", info.Version, info.Revision,
			labels["org.opencontainers.image.version"], labels["org.opencontainers.image.revision"])
	}
	if want := platform.OS + "/" + platform.Architecture; info.Platform != want {
		t.Errorf("the binary's platform is %q, want %q", info.Platform, want)
	}
}

// gitRevision is the commit of this tree, which the image's revision label must name.
func gitRevision(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
