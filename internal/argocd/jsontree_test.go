package argocd

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAppendJSONIsMarshal: AppendJSON writes what json.Marshal writes, byte for byte (the hashes of the statuses
// on the hub depend on it), for Application statuses, for trees with every kind of string and number, and for
// what is not a tree; and it fails where json.Marshal fails.
func TestAppendJSONIsMarshal(t *testing.T) {
	var status map[string]any
	if err := json.Unmarshal([]byte(sampleStatus), &status); err != nil {
		t.Fatal(err)
	}
	values := []any{
		status, nil, map[string]any(nil), []any(nil), map[string]any{}, []any{}, true, false, "", 0.0,
		math.Copysign(0, -1), 1e-7, 1e-6, 123456789.0, 1e20, 1e21, -1.5e-300, math.MaxFloat64, 0.1, 1.0 / 3,
		"plain", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\r\b\f\x00\x1f\x7f", "héllo wörld",
		"\u2028\u2029", "invalid \xff utf-8", "emoji 🚀",
		map[string]any{"z": 1.0, "a": []any{"x", nil, map[string]any{"<": ">"}}, "é": false, "": ""},
		// Not trees: encoding/json encodes them.
		map[string]string{"b": "1", "a": "2"}, []map[string]any{{"op": "add"}}, struct{ A int }{1}, 42,
		map[string]any{"raw": json.RawMessage(`{"b": 1, "a":"<"}`), "n": json.Number("12"), "i": int64(-3)},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		values = append(values, randomTree(rng, 4))
	}
	for i, v := range values {
		want, wantErr := json.Marshal(v)
		got, err := AppendJSON([]byte("prefix"), v)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("value %d (%#v): AppendJSON = %q, %v; json.Marshal = %q, %v", i, v, got, err, want, wantErr)
		}
		if wantErr != nil {
			continue
		}
		hash, n, err := HashJSON(v)
		if err != nil || hash != hashBytes(want) || n != len(want) || JSONSize(v) != len(want) {
			t.Fatalf("value %d: HashJSON = %s, %d, %v; want %s, %d", i, hash, n, err, hashBytes(want), len(want))
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), map[string]any{"a": []any{math.Inf(-1)}}} {
		if _, err := AppendJSON(nil, bad); err == nil {
			t.Errorf("%v encoded", bad)
		}
		if _, _, err := HashJSON(bad); err == nil {
			t.Errorf("%v hashed", bad)
		}
	}
}

// randomTree is a random JSON tree of at most the given depth.
func randomTree(rng *rand.Rand, depth int) any {
	kind := rng.IntN(7)
	if depth == 0 {
		kind = rng.IntN(4)
	}
	switch kind {
	case 0:
		return randomString(rng)
	case 1:
		return []float64{rng.NormFloat64() * math.Pow(10, float64(rng.IntN(50)-25)), float64(rng.IntN(1000)), 0}[rng.IntN(3)]
	case 2:
		return rng.IntN(2) == 0
	case 3:
		return nil
	case 4, 5:
		m := map[string]any{}
		for range rng.IntN(6) {
			m[randomString(rng)] = randomTree(rng, depth-1)
		}
		return m
	default:
		s := []any{}
		for range rng.IntN(5) {
			s = append(s, randomTree(rng, depth-1))
		}
		return s
	}
}

func randomString(rng *rand.Rand) string {
	const alphabet = "abcXYZ019 -_./:\"\\<>&\t\n\x01é🚀\u2028"
	runes := []rune(alphabet)
	var b strings.Builder
	for range rng.IntN(12) {
		if rng.IntN(40) == 0 {
			b.WriteByte(0xff) // invalid UTF-8
			continue
		}
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	return b.String()
}

// sampleStatus is an Application status as the controller composes it from a work's feedback.
const sampleStatus = `{"sync":{"status":"Synced","comparedTo":{"source":{"repoURL":"https://github.com/argoproj/argocd-example-apps","path":"guestbook","targetRevision":"HEAD"},"destination":{"server":"https://kubernetes.default.svc","namespace":"guestbook"}},"revision":"53e28ff20cc530b9ada2173fbbd64d48338583ba"},
"health":{"status":"Healthy","lastTransitionTime":"2026-12-03T10:00:05Z"},
"resources":[{"group":"apps","version":"v1","kind":"Deployment","namespace":"guestbook","name":"guestbook-ui","status":"Synced","health":{"status":"Healthy"}},{"version":"v1","kind":"Service","namespace":"guestbook","name":"guestbook-ui","status":"Synced","health":{"status":"Healthy"}}],
"history":[{"revision":"53e28ff20cc530b9ada2173fbbd64d48338583ba","deployedAt":"2026-12-03T10:00:05Z","id":0,"source":{"repoURL":"https://github.com/argoproj/argocd-example-apps","path":"guestbook","targetRevision":"HEAD"},"deployStartedAt":"2026-12-03T10:00:00Z","initiatedBy":{"automated":true}}],
"operationState":{"operation":{"sync":{"revision":"53e28ff20cc530b9ada2173fbbd64d48338583ba","prune":true,"syncOptions":["CreateNamespace=true"]},"initiatedBy":{"automated":true},"retry":{"limit":5}},"phase":"Succeeded","message":"successfully synced (all tasks run)","startedAt":"2026-12-03T10:00:00Z","finishedAt":"2026-12-03T10:00:05Z"},
"conditions":[{"type":"ComparisonError","message":"rpc error: code = Unknown desc = <nil> & more","lastTransitionTime":"2026-12-03T10:00:00Z"}],
"reconciledAt":"2026-12-03T10:00:06Z","sourceType":"Directory","summary":{"images":["gcr.io/heptio-images/ks-guestbook-demo:0.2"]},"controllerNamespace":"argocd"}`

// BenchmarkHashStatus: the hash of an Application status as the controller composes it, encoded without
// reflection (tree, what HashJSON does) and by encoding/json (what it did before).
func BenchmarkHashStatus(b *testing.B) {
	var status map[string]any
	if err := json.Unmarshal([]byte(sampleStatus), &status); err != nil {
		b.Fatal(err)
	}
	for name, hash := range map[string]func(any) (string, int, error){"tree": HashJSON, "encoding-json": hashEncoded} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := hash(status); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
