// Command image assembles argocd-pull's container image without a container engine: for each platform, the
// static binary built beforehand and a CA bundle on an empty base, run as a non-root user, written as a
// multi-platform OCI image layout (an image index with one manifest per platform). build.sh compiles the
// binaries and calls it; `make image` calls build.sh.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed layout.
const (
	// Entrypoint is where the binary lives in the image.
	Entrypoint = "/usr/local/bin/argocd-pull"
	// CABundle is where the CA bundle lives (Debian's path, which Go's crypto/x509 reads on Linux).
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// User is the non-root user and group the image runs as (distroless's "nonroot").
	User = "65532:65532"
)

// stringsFlag is a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	out      string
	binaries stringsFlag
	caBundle string
	labels   stringsFlag
	created  string
	tag      string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "Directory of the OCI image layout to write (replaced)")
	flag.Var(&o.binaries, "binary", "OS/ARCH=PATH of a static argocd-pull binary; repeat per platform")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to put in the image")
	flag.Var(&o.labels, "label", "KEY=VALUE image label (org.opencontainers.image.*); repeat")
	flag.StringVar(&o.created, "created", "", "Creation time (RFC 3339) of the image, its history and its files: the commit's time makes the build reproducible")
	flag.StringVar(&o.tag, "tag", "", "Reference name of the image in the layout's index.json (org.opencontainers.image.ref.name)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.out == "" || len(o.binaries) == 0 || o.created == "" || o.tag == "" {
		return errors.New("-out, -binary, -created and -tag are required")
	}
	created, err := time.Parse(time.RFC3339, o.created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	labels := map[string]string{}
	for _, l := range o.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("-label %q is not KEY=VALUE", l)
		}
		labels[k] = v
	}
	bundle, err := os.ReadFile(o.caBundle)
	if err != nil {
		return fmt.Errorf("read ca bundle: %w", err)
	}
	base, err := baseLayer(bundle, created)
	if err != nil {
		return err
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range o.binaries {
		platform, file, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("-binary %q is not OS/ARCH=PATH", b)
		}
		p, err := v1.ParsePlatform(platform)
		if err != nil {
			return fmt.Errorf("-binary %q: %w", b, err)
		}
		img, err := image(base, file, p, labels, created)
		if err != nil {
			return fmt.Errorf("image for %s: %w", platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)

	if err := os.RemoveAll(o.out); err != nil {
		return fmt.Errorf("remove %s: %w", o.out, err)
	}
	lp, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout %s: %w", o.out, err)
	}
	annotations := map[string]string{"org.opencontainers.image.ref.name": o.tag}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(annotations)); err != nil {
		return fmt.Errorf("write index to %s: %w", o.out, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: image index %s (%s), tag %s\n", o.out, d, strings.Join(o.binaries, ", "), o.tag)
	return nil
}

// image is one platform's image: the base layer, a layer with the binary, and the configuration.
func image(base v1.Layer, binary string, p *v1.Platform, labels map[string]string, created time.Time) (v1.Image, error) {
	data, err := os.ReadFile(binary) //nolint:gosec // the binary build.sh built
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	bin, err := layer([]file{{name: Entrypoint, mode: 0o755, data: data}}, created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "argocd-pull hack/image: CA bundle, /etc/passwd, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "argocd-pull hack/image: " + Entrypoint, Comment: "binary"}},
	)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Author = "argocd-pull"
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CABundle, "HOME=/tmp"},
		WorkingDir: "/",
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// baseLayer holds what an empty base lacks: the CA bundle, a passwd and group file that name the non-root user
// (some libraries look the user up), and a world-writable /tmp (a read-only root file system mounts its own).
func baseLayer(bundle []byte, created time.Time) (v1.Layer, error) {
	return layer([]file{
		{name: CABundle, mode: 0o644, data: bundle},
		{name: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n")},
		{name: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "/tmp/", mode: 0o1777},
	}, created)
}

// file is a file of a layer; a name ending in "/" is a directory.
type file struct {
	name string
	mode int64
	data []byte
}

// layer writes files, and their parent directories, into a gzip-compressed tar layer with fixed times and
// owners, so that the same inputs give the same digest.
func layer(files []file, created time.Time) (v1.Layer, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(strings.TrimSuffix(f.name, "/")); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range names {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		name := strings.TrimPrefix(f.name, "/")
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.mode, Size: int64(len(f.data)), ModTime: created, Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
