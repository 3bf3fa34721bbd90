package application_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// lagWatches returns a copy of cfg whose watches of the resource arrive lag late: every chunk of a watch
// response is handed to the client lag after it came from the apiserver. Writes, reads and lists are not
// delayed, so a controller started with it sees its own writes in its cache only lag later — the window that a
// busy apiserver or a slow network opens in production, made wide and deterministic.
func lagWatches(cfg *rest.Config, resource string, lag time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	wrap := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return &lagTransport{next: rt, resource: "/" + resource, lag: lag}
	}
	return cfg
}

type lagTransport struct {
	next     http.RoundTripper
	resource string
	lag      time.Duration
}

func (t *lagTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" || !strings.HasSuffix(req.URL.Path, t.resource) {
		return resp, err
	}
	resp.Body = newLagReader(resp.Body, t.lag)
	return resp, nil
}

// lagReader delivers what it reads from body lag after it was read.
type lagReader struct {
	body   io.ReadCloser
	lag    time.Duration
	chunks chan lagChunk
	rest   []byte
	err    error
	done   chan struct{}
	once   sync.Once
}

type lagChunk struct {
	data []byte
	at   time.Time
	err  error
}

func newLagReader(body io.ReadCloser, lag time.Duration) *lagReader {
	r := &lagReader{body: body, lag: lag, chunks: make(chan lagChunk, 1024), done: make(chan struct{})}
	go r.pump()
	return r
}

func (r *lagReader) pump() {
	for {
		buf := make([]byte, 32*1024)
		n, err := r.body.Read(buf)
		select {
		case r.chunks <- lagChunk{data: buf[:n], at: time.Now(), err: err}:
		case <-r.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (r *lagReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		var c lagChunk
		select {
		case c = <-r.chunks:
		case <-r.done:
			return 0, io.ErrClosedPipe
		}
		if wait := time.Until(c.at.Add(r.lag)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-r.done:
				return 0, io.ErrClosedPipe
			}
		}
		// The data now, the error (if any, and for good) on the next call.
		r.rest, r.err = c.data, c.err
		if len(r.rest) == 0 {
			return 0, r.err
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

func (r *lagReader) Close() error {
	r.once.Do(func() { close(r.done) })
	return r.body.Close()
}
