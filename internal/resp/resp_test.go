package resp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"simple", "+OK\r\n"},
		{"error", "-ERR no\r\n"},
		{"integer", ":42\r\n"},
		{"bulk", "$5\r\nhello\r\n"},
		{"bulk with CRLF inside", "$7\r\nhel\r\nlo\r\n"},
		{"null bulk", "$-1\r\n"},
		{"resp3 null", "_\r\n"},
		{"array", "*2\r\n$1\r\na\r\n:1\r\n"},
		{"nested", "*2\r\n*1\r\n+x\r\n$0\r\n\r\n"},
		{"map", "%2\r\n+a\r\n:1\r\n+b\r\n_\r\n"},
		{"push", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$0\r\n\r\n"},
		{"set, double, boolean, big number", "~4\r\n,1.5\r\n#t\r\n(123\r\n=7\r\ntxt:abc\r\n"},
		{"attribute before its reply", "|1\r\n+key\r\n+val\r\n:7\r\n"},
	}
	for _, tt := range tests {
		const next = "+NEXT\r\n"
		r := NewReader(strings.NewReader(tt.in + next))
		got, err := r.ReadReply()
		if err != nil || string(got) != tt.in {
			t.Errorf("%s: ReadReply = %q, %v; want %q", tt.name, got, err, tt.in)
			continue
		}
		if after, err := r.ReadReply(); err != nil || string(after) != next {
			t.Errorf("%s: the next reply = %q, %v", tt.name, after, err)
		}
	}
}

func TestReadReplyErrors(t *testing.T) {
	for _, in := range []string{"?\r\n", "$abc\r\n", "$3\r\nabcd\r\n", "+no line end"} {
		_, err := NewReader(strings.NewReader(in)).ReadReply()
		if err == nil {
			t.Errorf("ReadReply(%q) succeeded", in)
		}
		if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadReply(%q) = %v", in, err)
		}
	}
}

func TestReadCommand(t *testing.T) {
	in := "*2\r\n$3\r\nGET\r\n$9\r\napp|x|1.0\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n"
	r := NewReader(strings.NewReader(in))
	args, raw, err := r.ReadCommand()
	if err != nil || len(args) != 2 || string(args[0]) != "GET" || string(args[1]) != "app|x|1.0" {
		t.Fatalf("ReadCommand = %q, %v", args, err)
	}
	if string(raw) != "*2\r\n$3\r\nGET\r\n$9\r\napp|x|1.0\r\n" {
		t.Errorf("raw = %q", raw)
	}
	if args, _, err := r.ReadCommand(); err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Errorf("inline command = %q, %v", args, err)
	}
	if args, _, err := r.ReadCommand(); err != nil || string(args[0]) != "QUIT" {
		t.Errorf("third command = %q, %v", args, err)
	}
	if _, _, err := NewReader(strings.NewReader("*1\r\n:1\r\n")).ReadCommand(); !errors.Is(err, ErrProtocol) {
		t.Errorf("a command of an integer = %v", err)
	}
}

func TestParseAndAppend(t *testing.T) {
	b := AppendPush(nil, 3, "message", "ch", "")
	v, rest, err := Parse(b)
	if err != nil || len(rest) != 0 || v.Type != '>' || len(v.Elems) != 3 || string(v.Elems[1].Str) != "ch" {
		t.Fatalf("Parse(push) = %+v, %q, %v", v, rest, err)
	}
	b = AppendPush(nil, 2, "subscribe", "ch", int64(1))
	if v, _, err := Parse(b); err != nil || v.Type != '*' || v.Elems[2].Type != ':' || string(v.Elems[2].Str) != "1" {
		t.Errorf("Parse(resp2 subscribe) = %+v, %v", v, err)
	}
	if v, _, _ := Parse(AppendNull(nil, 2)); !v.Null || v.Type != '$' {
		t.Errorf("resp2 null = %+v", v)
	}
	if v, _, _ := Parse(AppendNull(nil, 3)); !v.Null || v.Type != '_' {
		t.Errorf("resp3 null = %+v", v)
	}
	if v, _, _ := Parse(AppendError(nil, "ERR two\nlines")); v.Err() == nil || v.Err().Error() != "ERR two lines" {
		t.Errorf("error = %+v", v)
	}
	if got := AppendCommand(nil, "GET", "k"); !bytes.Equal(got, []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")) {
		t.Errorf("AppendCommand = %q", got)
	}
}
