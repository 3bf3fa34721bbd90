package argocd

import (
	"encoding/binary"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// internTable deduplicates strings. It is bounded: when it holds maxEntries strings or maxBytes bytes it
// starts over; the strings it handed out stay valid, they are only no longer shared with later ones.
type internTable struct {
	mu         sync.Mutex
	m          map[string]string
	bytes      int
	maxEntries int
	maxBytes   int
}

var interned = &internTable{maxEntries: 1 << 16, maxBytes: 32 << 20}

// Intern returns a string equal to s that is shared with earlier strings equal to it, so that the many copies
// of a string that repeats across cached objects (a label key, a condition reason) take its bytes once.
func Intern(s string) string { return interned.intern(s) }

func (t *internTable) intern(s string) string {
	if s == "" {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= t.maxEntries || t.bytes+len(s) > t.maxBytes {
		t.m, t.bytes = map[string]string{}, 0
	}
	t.m[s] = s
	t.bytes += len(s)
	return s
}

// maxShortString is the longest string InternShort interns.
const maxShortString = 64

// InternShort interns a string that may be one object's own only when it is short, so that long unique values
// do not fill the table.
func InternShort(s string) string {
	if len(s) > maxShortString {
		return s
	}
	return interned.intern(s)
}

// InternMetadata shares what an object's metadata repeats from object to object, so that a controller that
// caches 150,000 objects keeps each of them once: its namespace, its label and annotation keys and short values,
// and whole label and annotation maps, finalizer lists and owner references equal to another object's (the
// Applications that an ApplicationSet generates for one cluster carry the same annotations, and all of them
// the same owner). What it shares is read only, as the objects of a cache are: a copy to modify is a deep
// copy. It never writes into the maps and slices it is given, only into m: they may be shared already with
// objects other goroutines read (an informer transforms each object of a list twice, pagedlist, and the second
// time its maps are those shared with the objects in the cache).
func InternMetadata(m *metav1.ObjectMeta) {
	InternMetadataOwnAnnotations(m)
	m.Annotations = sharedMaps.share(m.Annotations)
}

// InternMetadataOwnAnnotations is InternMetadata for objects whose annotations are their own and are not
// shared whole (a work's name its Application and carry the sequence ID of its last event): only their keys
// and short values are.
func InternMetadataOwnAnnotations(m *metav1.ObjectMeta) {
	m.Namespace = interned.intern(m.Namespace)
	m.Labels = sharedMaps.share(internMap(m.Labels))
	m.Annotations = internMap(m.Annotations)
	m.Finalizers = sharedFinalizers.share(internFinalizers(m.Finalizers))
	m.OwnerReferences = sharedOwners.share(internOwners(m.OwnerReferences))
}

// internMap returns a map equal to m with its keys and short values interned: m itself when they are already,
// else a copy.
func internMap(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		ik, iv := interned.intern(k), InternShort(v)
		if out == nil {
			if sameString(ik, k) && sameString(iv, v) {
				continue
			}
			out = maps.Clone(m)
		}
		// A string key is replaced by the equal one assigned (the runtime updates string keys).
		out[ik] = iv
	}
	if out == nil {
		return m
	}
	return out
}

// internFinalizers returns finalizers interned: the same slice when they are already, else a copy.
func internFinalizers(finalizers []string) []string {
	var out []string
	for i, f := range finalizers {
		if f := interned.intern(f); !sameString(f, finalizers[i]) {
			if out == nil {
				out = slices.Clone(finalizers)
			}
			out[i] = f
		}
	}
	if out == nil {
		return finalizers
	}
	return out
}

// internOwners returns owner references with their API version, kind and name interned: the same slice when
// they are already, else a copy.
func internOwners(owners []metav1.OwnerReference) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for i, o := range owners {
		v, k, n := interned.intern(o.APIVersion), interned.intern(o.Kind), interned.intern(o.Name)
		if sameString(v, o.APIVersion) && sameString(k, o.Kind) && sameString(n, o.Name) {
			continue
		}
		if out == nil {
			out = slices.Clone(owners)
		}
		out[i].APIVersion, out[i].Kind, out[i].Name = v, k, n
	}
	if out == nil {
		return owners
	}
	return out
}

// sameString reports whether a and b are the same string, bytes and all, not only equal.
func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b)) //nolint:gosec // compares where two strings' bytes are; reads nothing through the pointers
}

// sharedTable shares values that are equal: it keeps one value per hash, and a value equal to the one kept for
// its hash is replaced by it. It keeps at most maxEntries values and starts over when full; the values it
// handed out stay valid, they are only no longer shared with later ones.
type sharedTable[V any] struct {
	mu         sync.Mutex
	m          map[uint64]V
	maxEntries int
	// hash hashes a value; ok is false for a value not to share.
	hash  func(h *maphash.Hash, v V) (ok bool)
	equal func(a, b V) bool
}

var (
	seed       = maphash.MakeSeed()
	sharedMaps = &sharedTable[map[string]string]{maxEntries: 1 << 14, hash: hashMap,
		equal: func(a, b map[string]string) bool { return maps.Equal(a, b) }}
	sharedFinalizers = &sharedTable[[]string]{maxEntries: 1 << 10, hash: hashFinalizers, equal: slices.Equal[[]string]}
	sharedOwners     = &sharedTable[[]metav1.OwnerReference]{maxEntries: 1 << 14, hash: hashOwners,
		equal: func(a, b []metav1.OwnerReference) bool {
			return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool { return equality.Semantic.DeepEqual(x, y) })
		}}
)

// share returns the value kept equal to v, or v, which it keeps when it can.
func (t *sharedTable[V]) share(v V) V {
	var h maphash.Hash
	h.SetSeed(seed)
	if !t.hash(&h, v) {
		return v
	}
	sum := h.Sum64()
	t.mu.Lock()
	defer t.mu.Unlock()
	if kept, ok := t.m[sum]; ok {
		if t.equal(kept, v) {
			return kept
		}
		return v // another value with the same hash: not shared
	}
	if t.m == nil || len(t.m) >= t.maxEntries {
		t.m = map[uint64]V{}
	}
	t.m[sum] = v
	return v
}

// maxSharedMap is the most entries of a label or annotation map that is shared whole.
const maxSharedMap = 16

// hashMap hashes a map that is worth sharing: not empty, with few entries and no long value.
func hashMap(h *maphash.Hash, m map[string]string) bool {
	if len(m) == 0 || len(m) > maxSharedMap {
		return false
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if len(v) > maxShortString {
			return false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeString(h, k)
		writeString(h, m[k])
	}
	return true
}

func hashFinalizers(h *maphash.Hash, finalizers []string) bool {
	if len(finalizers) == 0 {
		return false
	}
	for _, f := range finalizers {
		writeString(h, f)
	}
	return true
}

func hashOwners(h *maphash.Hash, owners []metav1.OwnerReference) bool {
	if len(owners) == 0 {
		return false
	}
	for _, o := range owners {
		for _, s := range []string{o.APIVersion, o.Kind, o.Name, string(o.UID)} {
			writeString(h, s)
		}
		for _, b := range []*bool{o.Controller, o.BlockOwnerDeletion} {
			switch {
			case b == nil:
				h.WriteByte(0)
			case *b:
				h.WriteByte(1)
			default:
				h.WriteByte(2)
			}
		}
	}
	return true
}

// writeString hashes a string and its length, so that no two lists of strings hash alike by construction.
func writeString(h *maphash.Hash, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.WriteString(s)
}
