package workclient

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
)

// keptAnnotations are a kept work's annotations, encoded in one string: a count, then each annotation in the
// order of its key, its key as a number (annotationKeys) or, for a key not numbered, a 0 and the key itself, and
// its value. Kept as a map, a work's annotations were a map and its dozen strings for the collector to scan at
// every cycle, and a copy of them for each status; encoded, they are one string it does not scan, which the
// statuses of the work share. Reading them builds a map whose strings are parts of the encoding: they copy
// nothing.
type keptAnnotations string

// encodeAnnotations encodes annotations but the one of key skip; the empty string for none.
func encodeAnnotations(annotations map[string]string, skip string) keptAnnotations {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if k != skip {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	size := 1
	for _, k := range keys {
		size += 2*binary.MaxVarintLen16 + len(k) + len(annotations[k])
	}
	b := binary.AppendUvarint(make([]byte, 0, size), uint64(len(keys)))
	for _, k := range keys {
		n := annotationKeys.number(k)
		b = binary.AppendUvarint(b, uint64(n))
		if n == 0 {
			b = appendString(b, k)
		}
		b = appendString(b, annotations[k])
	}
	return keptAnnotations(b)
}

// each calls f with each annotation, in the order of their keys, until f returns false.
func (a keptAnnotations) each(f func(key, value string) bool) {
	if a == "" {
		return
	}
	s := string(a)
	count := uvarint(&s)
	keys := annotationKeys.list()
	for range count {
		var key string
		if n := uvarint(&s); n == 0 {
			key = part(&s)
		} else {
			key = keys[n-1]
		}
		if !f(key, part(&s)) {
			return
		}
	}
}

// get returns the value of an annotation.
func (a keptAnnotations) get(key string) (value string, ok bool) {
	a.each(func(k, v string) bool {
		if k == key {
			value, ok = v, true
			return false
		}
		return true
	})
	return value, ok
}

// asMap returns the annotations as a new map, with one more annotation when value is not empty.
func (a keptAnnotations) asMap(key, value string) map[string]string {
	count := 0
	if a != "" {
		s := string(a)
		count = int(uvarint(&s))
	}
	if value != "" {
		count++
	}
	if count == 0 {
		return nil
	}
	out := make(map[string]string, count)
	a.each(func(k, v string) bool {
		out[k] = v
		return true
	})
	if value != "" {
		out[key] = value
	}
	return out
}

// uvarint reads a number off the front of s. The store encoded s itself: it cannot be short.
func uvarint(s *string) uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := (*s)[0]
		*s = (*s)[1:]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

// part reads a length and that many bytes off the front of s, as a part of s.
func part(s *string) string {
	l := uvarint(s)
	out := (*s)[:l]
	*s = (*s)[l:]
	return out
}

// annotationKeys numbers the annotation keys of kept works, from 1, as they are met: a work's annotations
// repeat those of every other work, and the first maxAnnotationKeys keys met are encoded as their number. The
// numbers are shared by every store of the process and never change; readers take the list without a lock.
var annotationKeys = &keyNumbers{numbers: map[string]int{}}

const maxAnnotationKeys = 64

type keyNumbers struct {
	mu      sync.Mutex
	numbers map[string]int
	keys    atomic.Pointer[[]string]
}

// number returns the number of key, numbering it if there is room; 0 for a key left unnumbered.
func (k *keyNumbers) number(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, ok := k.numbers[key]; ok {
		return n
	}
	keys := k.list()
	if len(keys) >= maxAnnotationKeys {
		return 0
	}
	// The readers' list is replaced, not appended to: a reader may hold the one before.
	next := append(slices.Clone(keys), key)
	k.keys.Store(&next)
	k.numbers[key] = len(next)
	return len(next)
}

// list returns the keys numbered, the key of number n at n-1.
func (k *keyNumbers) list() []string {
	if keys := k.keys.Load(); keys != nil {
		return *keys
	}
	return nil
}
