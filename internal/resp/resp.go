// Package resp reads and writes the Redis serialization protocol, RESP2 and RESP3, as far as argocd-pull's
// console needs it: the commands a client sends (arrays of bulk strings), whole replies of any type kept as the
// bytes they came in (so that a proxy passes them through unchanged and knows where each ends), and the few
// replies it writes itself, and a minimal client (GET, SUBSCRIBE). It knows nothing of Argo CD's keys.
package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxBulk bounds a bulk string or aggregate read from the wire, as redis bounds its own (proto-max-bulk-len).
const maxBulk = 512 << 20

// ErrProtocol is a reply or command that is not RESP.
var ErrProtocol = errors.New("resp: protocol error")

// Reader reads RESP from a connection.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Buffered reports how many bytes can be read without blocking: a client pipelined more commands when it is
// not zero.
func (r *Reader) Buffered() int { return r.r.Buffered() }

// ReadCommand reads one command: an array of bulk strings, or an inline command (words on a line, as
// redis-cli and telnet send). It returns the arguments and the command's raw bytes.
func (r *Reader) ReadCommand() (args [][]byte, raw []byte, err error) {
	line, err := r.line()
	if err != nil {
		return nil, nil, err
	}
	raw = append(raw, line...)
	if line[0] != '*' {
		for _, w := range strings.Fields(string(line)) {
			args = append(args, []byte(w))
		}
		if len(args) == 0 {
			return r.ReadCommand()
		}
		return args, raw, nil
	}
	n, err := length(line)
	if err != nil {
		return nil, nil, err
	}
	for range n {
		line, err := r.line()
		if err != nil {
			return nil, nil, err
		}
		if line[0] != '$' {
			return nil, nil, fmt.Errorf("%w: command argument %q is not a bulk string", ErrProtocol, line)
		}
		raw = append(raw, line...)
		size, err := length(line)
		if err != nil || size < 0 {
			return nil, nil, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line)
		}
		body, err := r.body(size)
		if err != nil {
			return nil, nil, err
		}
		raw = append(raw, body...)
		args = append(args, body[:size])
	}
	return args, raw, nil
}

// ReadReply reads one whole reply of any RESP2 or RESP3 type, aggregates and a leading attribute included, and
// returns its raw bytes.
func (r *Reader) ReadReply() ([]byte, error) {
	return r.reply(nil)
}

func (r *Reader) reply(raw []byte) ([]byte, error) {
	line, err := r.line()
	if err != nil {
		return nil, err
	}
	raw = append(raw, line...)
	switch line[0] {
	case '+', '-', ':', '_', '#', ',', '(':
		return raw, nil
	case '$', '!', '=':
		n, err := length(line)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return raw, nil
		}
		body, err := r.body(n)
		if err != nil {
			return nil, err
		}
		return append(raw, body...), nil
	case '*', '~', '>', '%', '|':
		n, err := length(line)
		if err != nil {
			return nil, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if raw, err = r.reply(raw); err != nil {
				return nil, err
			}
		}
		if line[0] == '|' {
			// An attribute precedes the reply it describes.
			return r.reply(raw)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, line)
}

// ReadValue reads one reply and decodes it.
func (r *Reader) ReadValue() (Value, error) {
	raw, err := r.ReadReply()
	if err != nil {
		return Value{}, err
	}
	v, _, err := Parse(raw)
	return v, err
}

// line reads one line, CRLF included.
func (r *Reader) line() ([]byte, error) {
	line, err := r.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, r.r.Size())
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", ErrProtocol, line)
	}
	return append([]byte(nil), line...), nil
}

// body reads n bytes and the CRLF after them.
func (r *Reader) body(n int) ([]byte, error) {
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return nil, err
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return nil, fmt.Errorf("%w: bulk string not ended by CRLF", ErrProtocol)
	}
	return buf, nil
}

// length parses the number after a line's type byte.
func length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n > maxBulk {
		return 0, fmt.Errorf("%w: bad length in %q", ErrProtocol, line)
	}
	return n, nil
}

// Value is a decoded reply.
type Value struct {
	// Type is the reply's type byte: '+', '-', ':', '$', '*', '_', '>', ...
	Type byte
	// Str is a simple, bulk or verbatim string, an error's message, or a number's digits.
	Str []byte
	// Null is a null reply (RESP3 '_', or a RESP2 null bulk string or array).
	Null bool
	// Elems are an aggregate's elements (a map's keys and values in turn).
	Elems []Value
}

// Err returns an error reply as an error, or nil.
func (v Value) Err() error {
	if v.Type == '-' || v.Type == '!' {
		return errors.New(string(v.Str))
	}
	return nil
}

// Parse decodes the first reply in raw and returns the rest.
func Parse(raw []byte) (Value, []byte, error) {
	end := indexCRLF(raw)
	if end < 1 {
		return Value{}, nil, fmt.Errorf("%w: truncated reply", ErrProtocol)
	}
	head, rest := raw[:end+2], raw[end+2:]
	v := Value{Type: head[0]}
	switch head[0] {
	case '+', '-', ':', '#', ',', '(':
		v.Str = head[1:end]
		return v, rest, nil
	case '_':
		v.Null = true
		return v, rest, nil
	case '$', '!', '=':
		n, err := length(head)
		if err != nil {
			return Value{}, nil, err
		}
		if n < 0 {
			v.Null = true
			return v, rest, nil
		}
		if len(rest) < n+2 {
			return Value{}, nil, fmt.Errorf("%w: truncated bulk string", ErrProtocol)
		}
		v.Str = rest[:n]
		return v, rest[n+2:], nil
	case '*', '~', '>', '%', '|':
		n, err := length(head)
		if err != nil {
			return Value{}, nil, err
		}
		if n < 0 {
			v.Null = true
			return v, rest, nil
		}
		if head[0] == '%' || head[0] == '|' {
			n *= 2
		}
		for range n {
			var e Value
			if e, rest, err = Parse(rest); err != nil {
				return Value{}, nil, err
			}
			v.Elems = append(v.Elems, e)
		}
		if head[0] == '|' {
			return Parse(rest)
		}
		return v, rest, nil
	}
	return Value{}, nil, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, head[0])
}

func indexCRLF(b []byte) int {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			return i
		}
	}
	return -1
}

// AppendCommand appends a command: an array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = AppendBulk(b, []byte(a))
	}
	return b
}

// AppendBulk appends a bulk string.
func AppendBulk(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendNull appends the null reply of a protocol version (2 or 3).
func AppendNull(b []byte, proto int) []byte {
	if proto >= 3 {
		return append(b, "_\r\n"...)
	}
	return append(b, "$-1\r\n"...)
}

// AppendError appends an error reply; line breaks in msg become spaces.
func AppendError(b []byte, msg string) []byte {
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	b = append(b, '-')
	b = append(b, msg...)
	return append(b, '\r', '\n')
}

// AppendInt appends an integer reply.
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendPush appends a pub/sub message (subscribe confirmations, messages): a RESP3 push, or a RESP2 array.
// Each element is a bulk string, except an int64, which is an integer.
func AppendPush(b []byte, proto int, elems ...any) []byte {
	if proto >= 3 {
		b = append(b, '>')
	} else {
		b = append(b, '*')
	}
	b = strconv.AppendInt(b, int64(len(elems)), 10)
	b = append(b, '\r', '\n')
	for _, e := range elems {
		switch e := e.(type) {
		case int64:
			b = AppendInt(b, e)
		case string:
			b = AppendBulk(b, []byte(e))
		case []byte:
			b = AppendBulk(b, e)
		}
	}
	return b
}
