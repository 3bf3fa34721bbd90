package workclient

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// keptWork is a work as the grpc transport's store keeps it: its metadata and its status encoded. A work's
// status as the agent reports it is several kilobytes: conditions for every manifest and, for the
// Application, the feedback of each status section as raw JSON. Kept as received, 150,000 works took more than
// a gigabyte of the controller's memory. The store keeps the same content in a compact binary encoding,
// compressed over a dictionary (statusCodec), the strings and maps every work's metadata repeats shared, and
// its annotations encoded (keptAnnotations). A work is rebuilt in full when it is read (Get, List), and only
// its metadata goes to event handlers.
type keptWork struct {
	// meta is the work's metadata without its annotations and managedFields, read only: what it repeats from
	// work to work (namespace, labels, finalizers) is shared.
	meta metav1.ObjectMeta
	// annotations are its annotations but the sequence ID of its last event (seq), encoded: the statuses of a
	// work, each a keptWork, share them.
	annotations keptAnnotations
	seq         string
	// status is the status encoded by codec; nil for an empty status.
	status []byte
	codec  *statusCodec
	// statusHash is sdk-go's hash of the status, once a resync asked for it (workStore.statusHash); set under the
	// store's lock.
	statusHash string
}

// compactWork keeps a work, its status encoded by the store's codec; the caller holds the store's lock.
func (s *workStore) compactWork(w *workv1.ManifestWork) (*keptWork, error) {
	k := &keptWork{
		annotations: encodeAnnotations(w.Annotations, common.CloudEventsSequenceIDAnnotationKey),
		seq:         w.Annotations[common.CloudEventsSequenceIDAnnotationKey],
	}
	w.ObjectMeta.DeepCopyInto(&k.meta)
	k.meta.ManagedFields, k.meta.Annotations = nil, nil
	argocd.InternMetadataOwnAnnotations(&k.meta)
	var err error
	if k.status, k.codec, err = s.encodeStatus(&w.Status); err != nil {
		return nil, fmt.Errorf("store work %s/%s: %w", w.Namespace, w.Name, err)
	}
	return k, nil
}

// metadata returns the work without its status, for the store's handlers, which share it, to read: its labels and
// finalizers are the store's.
func (k *keptWork) metadata() *workv1.ManifestWork {
	w := &workv1.ManifestWork{TypeMeta: workTypeMeta, ObjectMeta: k.meta}
	w.Annotations = k.annotationMap()
	return w
}

// copyMeta copies the work's metadata into m, for the caller to keep or modify.
func (k *keptWork) copyMeta(m *metav1.ObjectMeta) {
	k.meta.DeepCopyInto(m)
	m.Annotations = k.annotationMap()
}

// annotationMap returns the work's annotations, its sequence ID among them, as a new map.
func (k *keptWork) annotationMap() map[string]string {
	return k.annotations.asMap(common.CloudEventsSequenceIDAnnotationKey, k.seq)
}

// annotation returns one of the work's annotations.
func (k *keptWork) annotation(key string) string {
	if key == common.CloudEventsSequenceIDAnnotationKey {
		return k.seq
	}
	v, _ := k.annotations.get(key)
	return v
}

// applicationKey is ApplicationKey of the work.
func (k *keptWork) applicationKey() string { return applicationKey(&k.meta, k.annotation) }

// work rebuilds the whole work (without its spec, which the server keeps), for the caller to keep or modify.
func (k *keptWork) work() *workv1.ManifestWork {
	w := &workv1.ManifestWork{TypeMeta: workTypeMeta}
	k.copyMeta(&w.ObjectMeta)
	w.Status = k.decodedStatus()
	return w
}

// decodedStatus returns the kept status.
func (k *keptWork) decodedStatus() workv1.ManifestWorkStatus {
	if k.status == nil {
		return workv1.ManifestWorkStatus{}
	}
	status, err := k.codec.decode(k.status)
	if err != nil {
		// The store encoded these bytes itself: they cannot be wrong.
		panic(fmt.Sprintf("decode the stored status of work %s/%s: %v", k.meta.Namespace, k.meta.Name, err))
	}
	return status
}

// sameStatus reports whether the kept status is the one encoded as enc by codec.
func (k *keptWork) sameStatus(enc []byte, codec *statusCodec) bool {
	if k.codec == codec || k.status == nil || enc == nil {
		return bytes.Equal(k.status, enc)
	}
	// Encoded by another codec (before the store learned its dictionary): compare the statuses.
	kept, err1 := k.codec.plain(k.status)
	other, err2 := codec.plain(enc)
	return err1 == nil && err2 == nil && bytes.Equal(kept, other)
}

// encodeStatus encodes a status with the store's codec, which learns its dictionary from the first status with
// an Application's feedback; the caller holds the store's lock. An empty status encodes as nil.
func (s *workStore) encodeStatus(st *workv1.ManifestWorkStatus) ([]byte, *statusCodec, error) {
	plain := appendStatusTo(s.plain[:0], st)
	if plain == nil {
		return nil, nil, nil
	}
	// Nothing keeps plain: the next status is encoded where it was, rather than in a buffer grown again from
	// nothing, which was several kilobytes of garbage per status.
	s.plain = plain[:0]
	if s.codec == vocabularyCodec && len(plain) >= learnFrom {
		// The Application's feedback comes last; a longer sample would cost time to every encoding.
		sample := plain[max(0, len(plain)-maxLearned):]
		s.codec = newStatusCodec(append(slices.Clip(s.codec.dict), sample...))
	}
	enc, err := s.codec.encode(plain)
	return enc, s.codec, err
}

var workTypeMeta = metav1.TypeMeta{APIVersion: workv1.GroupVersion.String(), Kind: "ManifestWork"}

// A status is encoded field after field: strings (and raw JSON) as a length and bytes, integers as varints,
// times as seconds and nanoseconds, lists as a count then their items. Encodings over compressAbove bytes are
// compressed with DEFLATE over the codec's dictionary; the first byte says whether.
const (
	encodingPlain   = 0
	encodingDeflate = 1
	compressAbove   = 256
	// learnFrom is the size of the first status a store learns its dictionary from: one with an Application's
	// feedback (a status without is a few hundred bytes).
	learnFrom = 1024
	// maxLearned is the most of that status the dictionary keeps: its end.
	maxLearned = 8 << 10
	// deflateLevel is the fastest level that uses a dictionary (BestSpeed does not).
	deflateLevel = 2
)

// Which values of a FieldValue are set.
const (
	valueInteger = 1 << iota
	valueString
	valueBoolean
	valueJSONRaw
)

// statusCodec compresses encoded statuses with DEFLATE over a preset dictionary. One Application's status
// repeats the words of every other's: the work agent's conditions, the field names of an Argo CD status, and
// in a fleet the same repositories, revisions, destinations and kinds of resources. DEFLATE alone shares
// nothing between two statuses; with a dictionary of those words a status takes a fifth of the bytes. A store
// starts with a dictionary of the vocabulary (statusVocabulary) and learns a second one, that vocabulary and
// the first status with an Application's feedback it keeps, once. Each kept status names the codec that
// encoded it.
//
// Its writers and readers wait in free lists of their own rather than in a sync.Pool, which the collector
// empties every other cycle: under its memory limit the controller runs cycles back to back, and the writer
// made again after each (its tables are most of a megabyte) was 3.4 % of the bytes it allocated at 15,000
// works under a 128Mi limit.
type statusCodec struct {
	dict    []byte
	writers chan *flate.Writer // over dict
	readers chan io.ReadCloser // flate readers, reset with dict
}

// Free writers and readers kept: encodings are made under the store's lock, one at a time; decodings by the
// controller's workers, several at once.
const (
	freeWriters = 2
	freeReaders = 8
)

func newStatusCodec(dict []byte) *statusCodec {
	return &statusCodec{dict: dict, writers: make(chan *flate.Writer, freeWriters), readers: make(chan io.ReadCloser, freeReaders)}
}

// writer returns a free writer, or a new one.
func (c *statusCodec) writer() *flate.Writer {
	select {
	case w := <-c.writers:
		return w
	default:
		w, _ := flate.NewWriterDict(nil, deflateLevel, c.dict)
		return w
	}
}

// free keeps v in list for the next caller, unless the list is full.
func free[T any](list chan T, v T) {
	select {
	case list <- v:
	default:
	}
}

// vocabularyCodec is the codec every store starts with.
var vocabularyCodec = newStatusCodec([]byte(statusVocabulary))

// appendStatus encodes a status without compressing it; nil for an empty status.
func appendStatus(st *workv1.ManifestWorkStatus) []byte { return appendStatusTo(nil, st) }

// appendStatusTo is appendStatus appending to b; nil for an empty status.
func appendStatusTo(b []byte, st *workv1.ManifestWorkStatus) []byte {
	if len(st.Conditions) == 0 && len(st.ResourceStatus.Manifests) == 0 {
		return nil
	}
	b = appendConditions(b, st.Conditions)
	b = binary.AppendUvarint(b, uint64(len(st.ResourceStatus.Manifests)))
	for _, m := range st.ResourceStatus.Manifests {
		r := m.ResourceMeta
		b = binary.AppendVarint(b, int64(r.Ordinal))
		for _, f := range []string{r.Group, r.Version, r.Kind, r.Resource, r.Name, r.Namespace} {
			b = appendString(b, f)
		}
		b = appendConditions(b, m.Conditions)
		b = appendFeedback(b, m.StatusFeedbacks.Values)
	}
	return b
}

// encode compresses an encoded status when it is large enough to gain from it.
func (c *statusCodec) encode(plain []byte) ([]byte, error) {
	if len(plain) <= compressAbove {
		return append([]byte{encodingPlain}, plain...), nil
	}
	var out bytes.Buffer
	out.WriteByte(encodingDeflate)
	w := c.writer()
	defer free(c.writers, w)
	w.Reset(&out)
	if _, err := w.Write(plain); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return bytes.Clone(out.Bytes()), nil
}

// plain returns the uncompressed encoding of enc.
func (c *statusCodec) plain(enc []byte) ([]byte, error) {
	if len(enc) == 0 {
		return nil, errShortStatus
	}
	if enc[0] != encodingDeflate {
		return enc[1:], nil
	}
	src := bytes.NewReader(enc[1:])
	var r io.ReadCloser
	select {
	case r = <-c.readers:
		if err := r.(flate.Resetter).Reset(src, c.dict); err != nil {
			return nil, err
		}
	default:
		r = flate.NewReaderDict(src, c.dict)
	}
	defer free(c.readers, r)
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("inflate status: %w", err)
	}
	return b, nil
}

func appendConditions(b []byte, conditions []metav1.Condition) []byte {
	b = binary.AppendUvarint(b, uint64(len(conditions)))
	for _, c := range conditions {
		b = appendString(b, c.Type)
		b = appendString(b, string(c.Status))
		b = binary.AppendVarint(b, c.ObservedGeneration)
		b = binary.AppendVarint(b, c.LastTransitionTime.Unix())
		b = binary.AppendVarint(b, int64(c.LastTransitionTime.Nanosecond()))
		b = appendString(b, c.Reason)
		b = appendString(b, c.Message)
	}
	return b
}

func appendFeedback(b []byte, values []workv1.FeedbackValue) []byte {
	b = binary.AppendUvarint(b, uint64(len(values)))
	for _, v := range values {
		b = appendString(b, v.Name)
		b = appendString(b, string(v.Value.Type))
		set := byte(0)
		if v.Value.Integer != nil {
			set |= valueInteger
		}
		if v.Value.String != nil {
			set |= valueString
		}
		if v.Value.Boolean != nil {
			set |= valueBoolean
		}
		if v.Value.JsonRaw != nil {
			set |= valueJSONRaw
		}
		b = append(b, set)
		if v.Value.Integer != nil {
			b = binary.AppendVarint(b, *v.Value.Integer)
		}
		if v.Value.String != nil {
			b = appendString(b, *v.Value.String)
		}
		if v.Value.Boolean != nil {
			b = append(b, map[bool]byte{false: 0, true: 1}[*v.Value.Boolean])
		}
		if v.Value.JsonRaw != nil {
			b = appendString(b, *v.Value.JsonRaw)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShortStatus = errors.New("short status encoding")

// decode decodes an encoded status.
func (c *statusCodec) decode(enc []byte) (workv1.ManifestWorkStatus, error) {
	var st workv1.ManifestWorkStatus
	b, err := c.plain(enc)
	if err != nil {
		return st, err
	}
	d := decoder{b: b}
	st.Conditions = d.conditions()
	if n := d.count(); n > 0 {
		st.ResourceStatus.Manifests = make([]workv1.ManifestCondition, n)
		for i := range st.ResourceStatus.Manifests {
			m := &st.ResourceStatus.Manifests[i]
			r := &m.ResourceMeta
			r.Ordinal = int32(d.varint()) //nolint:gosec // written from an int32
			r.Group, r.Version, r.Kind, r.Resource, r.Name, r.Namespace = d.string(), d.string(), d.string(), d.string(), d.string(), d.string()
			m.Conditions = d.conditions()
			m.StatusFeedbacks.Values = d.feedback()
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("trailing bytes after the status")
	}
	return st, d.err
}

// decoder reads appendStatus's encoding; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) conditions() []metav1.Condition {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]metav1.Condition, n)
	for i := range out {
		c := &out[i]
		c.Type, c.Status = d.string(), metav1.ConditionStatus(d.string())
		c.ObservedGeneration = d.varint()
		sec, nsec := d.varint(), d.varint()
		c.LastTransitionTime = metav1.NewTime(time.Unix(sec, nsec))
		c.Reason, c.Message = d.string(), d.string()
	}
	return out
}

func (d *decoder) feedback() []workv1.FeedbackValue {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]workv1.FeedbackValue, n)
	for i := range out {
		v := &out[i]
		v.Name, v.Value.Type = d.string(), workv1.ValueType(d.string())
		set := d.byte()
		if set&valueInteger != 0 {
			n := d.varint()
			v.Value.Integer = &n
		}
		if set&valueString != 0 {
			s := d.string()
			v.Value.String = &s
		}
		if set&valueBoolean != 0 {
			t := d.byte() == 1
			v.Value.Boolean = &t
		}
		if set&valueJSONRaw != 0 {
			s := d.string()
			v.Value.JsonRaw = &s
		}
	}
	return out
}

// count reads a list's length; it cannot exceed the bytes left.
func (d *decoder) count() int {
	if d.err != nil {
		return 0
	}
	n, l := binary.Uvarint(d.b)
	if l <= 0 || n > uint64(len(d.b)) {
		d.err = errShortStatus
		return 0
	}
	d.b = d.b[l:]
	return int(n)
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = errShortStatus
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShortStatus
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	if d.err != nil {
		return ""
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || uint64(len(d.b)-n) < l {
		d.err = errShortStatus
		return ""
	}
	s := string(d.b[n : n+int(l)])
	d.b = d.b[n+int(l):]
	return s
}
