package application

import (
	"hash/maphash"
	"strconv"
	"sync"
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

// buildInputs digests what a work is built from besides the Application: its cluster and name, the AppProject's
// name and version, the operation's baseline, and whether the refresh annotation is dropped.
func buildInputs(cluster, workName, project, projectVersion, baseline string, refreshCovered bool) uint64 {
	var h maphash.Hash
	h.SetSeed(buildSeed)
	for _, s := range []string{cluster, workName, project, projectVersion, baseline, strconv.FormatBool(refreshCovered)} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	return h.Sum64()
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
