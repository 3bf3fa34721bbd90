package argocd

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
)

// AppendJSON appends v's json.Marshal encoding to b. A JSON tree (what json.Unmarshal makes of a document
// into an any: maps of strings to trees, slices of trees, strings, float64s, booleans and nil, which is what
// the controller composes an Application status from) is encoded without reflection; anything else by
// encoding/json. encoding/json encodes a map by sorting reflected copies of its keys, a slice of them for each
// map: encoding the statuses the controller hashes and writes was 6 % of what it allocated at 150,000
// Applications, and 4 % of its CPU.
func AppendJSON(b []byte, v any) ([]byte, error) {
	if out, ok := appendTree(b, v); ok {
		return out, nil
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, enc...), nil
}

// appendTree appends the encoding of a JSON tree and reports whether v was one; encoding/json encodes what
// it was not, and what it would refuse (NaN, infinities).
func appendTree(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendJSONString(b, v), true
	case bool:
		return strconv.AppendBool(b, v), true
	case float64:
		return appendJSONFloat(b, v)
	case map[string]any:
		if v == nil {
			return append(b, "null"...), true
		}
		var small [16]string // most maps of a status fit: their keys are not allocated
		keys := small[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendTree(b, v[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendTree(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false
}

// appendJSONFloat appends a float64 as encoding/json does: like fmt's %g, with ES6's exponent cutoffs and
// exponents not padded.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// appendJSONString appends a string as encoding/json does. A string of printable ASCII without what
// encoding/json escapes (quotes, backslashes and, as it escapes HTML, <, > and &) is written as it is; any other
// is left to encoding/json, which escapes control characters, invalid UTF-8 and U+2028 and U+2029.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// withTreeEncoding calls use with v's encoding, in a pooled buffer that use must not keep, when v is a JSON
// tree, and reports whether it was.
func withTreeEncoding(v any, use func(enc []byte)) bool {
	buf := encodings.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledEncoding {
			encodings.Put(buf)
		}
	}()
	enc, ok := appendTree((*buf)[:0], v)
	*buf = enc[:0]
	if ok {
		use(enc)
	}
	return ok
}

// encodings are the buffers the hashes encode into.
var encodings = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEncoding is the largest buffer kept for the next encoding: an Application status is a few
// kilobytes, a report's can be a megabyte.
const maxPooledEncoding = 64 << 10
