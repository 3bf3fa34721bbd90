package application

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// builtWorks remembers, for each Application, the spec hash of the work last built for it and what that work was
// built from: the Application's resourceVersion (any change to the Application changes it) and BuildWork's other
// inputs. Most reconciles of an Application come from its work's status events (applied, available, each change
// of the managed cluster's Application) and find the Application as it was; when its work already carries the
// hash, there is nothing to build. Building the work (the Application decoded into an unstructured object,
// wrapped, encoded and hashed) at every reconcile was half of the controller's allocations while a fleet synced,
// 24 KB per reconcile.
type builtWorks struct {
	mu      sync.Mutex
	entries map[string]built
}

type built struct {
	resourceVersion string
	// inputs is a digest of BuildWork's other inputs (buildInputs).
	inputs uint64
	hash   string
}

var buildSeed = maphash.MakeSeed()

// buildInput is what a work is built from besides the Application: its cluster and name, the AppProject's name
// and version, the operation's baseline, and whether the refresh annotation is dropped.
type buildInput struct {
	cluster, workName, project, projectVersion, baseline string
	refreshCovered                                       bool
}

func (in buildInput) fields() []string {
	return []string{in.cluster, in.workName, in.project, in.projectVersion, in.baseline, strconv.FormatBool(in.refreshCovered)}
}

// buildInputs digests a build's input for builtWorks, within the process.
func buildInputs(in buildInput) uint64 {
	var h maphash.Hash
	h.SetSeed(buildSeed)
	for _, s := range in.fields() {
		h.WriteString(s)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// workFormat is the version of what BuildWork makes of its inputs, part of every work's built-from digest.
// Change it whenever BuildWork builds a different work from the same inputs, so that each work is built again
// once; TestWorkFormat pins the work built from a fixed Application and fails until it is changed.
const workFormat = 1

// builtFrom digests everything a work is built from, for AnnotationBuiltFrom: workFormat, the spoke's Argo CD
// namespace, BuildWork's other inputs, and of the Application its name, namespace, finalizers, labels,
// annotations (but argocd-pull's own), owning ApplicationSet, and its spec and operation as the apiserver
// encoded them. Unlike the Application's resourceVersion it does not change with the Application's status, and
// it outlives the controller: a restarted controller built every work again to compare its spec hash, 24 KB of
// allocations each, and the collector that took half the CPU of its catch-up at 150,000 Applications let its
// memory grow to twice its limit.
func builtFrom(app *argocd.Application, spokeArgoCDNamespace string, in buildInput) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(n[:0], uint64(len(b))))
		h.Write(b)
	}
	fieldString := func(s string) { field([]byte(s)) }
	fieldString(strconv.Itoa(workFormat))
	fieldString(spokeArgoCDNamespace)
	for _, s := range in.fields() {
		fieldString(s)
	}
	fieldString(app.Namespace)
	fieldString(app.Name)
	fieldString(strings.Join(app.Finalizers, ","))
	sortedMap := func(m map[string]string, keep func(string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			if keep(k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		fieldString(strconv.Itoa(len(keys)))
		for _, k := range keys {
			fieldString(k)
			fieldString(m[k])
		}
	}
	sortedMap(app.Labels, func(string) bool { return true })
	sortedMap(app.Annotations, func(k string) bool { return !strings.HasPrefix(k, annotationPrefix) })
	fieldString(argocd.OwningAppSet(app))
	field(app.Spec)
	field(app.Operation)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// hash returns the spec hash of the work last built for the Application key from that version and inputs.
func (b *builtWorks) hash(key, resourceVersion string, inputs uint64) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || e.resourceVersion != resourceVersion || e.inputs != inputs {
		return "", false
	}
	return e.hash, true
}

// record remembers the spec hash of the work built for the Application key.
func (b *builtWorks) record(key, resourceVersion string, inputs uint64, hash string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil {
		b.entries = map[string]built{}
	}
	b.entries[key] = built{resourceVersion: resourceVersion, inputs: inputs, hash: hash}
}

// forget drops what is remembered of the Application key: it is gone, or being deleted.
func (b *builtWorks) forget(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}
