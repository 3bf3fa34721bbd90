package loopback

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestInstallCRDsOnASlowAPIServer: waiting for a CRD to be established takes as long as the caller's context
// allows, not a fixed limit of its own. The apiserver answers the first read of a CRD 31 s late, as a busy one
// did during `make demo` (the wait gave up after 30 s: "wait for crd applicationsets.argoproj.io: context
// deadline exceeded", while the demo had minutes left).
func TestInstallCRDsOnASlowAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	files, err := CRDFiles(ArgoCDCRDs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Hub.Config())
	slow := &slowFirstRead{delay: 31 * time.Second, path: "/customresourcedefinitions/"}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { slow.next = rt; return slow }
	waitCtx, done := context.WithTimeout(ctx, 2*time.Minute)
	defer done()
	if err := InstallCRDs(waitCtx, cfg, files); err != nil {
		t.Fatalf("install CRDs on a slow apiserver within a 2-minute deadline: %v", err)
	}
	if !slow.delayed() {
		t.Fatal("no read was delayed")
	}
}

// slowFirstRead answers the first GET of a path containing path late.
type slowFirstRead struct {
	next  http.RoundTripper
	delay time.Duration
	path  string
	mu    sync.Mutex
	done  bool
}

func (s *slowFirstRead) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	first := !s.done && req.Method == http.MethodGet && strings.Contains(req.URL.Path, s.path)
	s.done = s.done || first
	s.mu.Unlock()
	if first {
		select {
		case <-time.After(s.delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return s.next.RoundTrip(req)
}

func (s *slowFirstRead) delayed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// TestWaitForReportsProgress: a wait that goes on says what it waits for, and ends with the context.
func TestWaitForReportsProgress(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 100 * time.Millisecond
	var mu sync.Mutex
	var lines []string
	ctx := WithProgress(context.Background(), func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() })
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err := waitFor(ctx, "the thing", 20*time.Millisecond, nil, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "wait for the thing") || !strings.Contains(err.Error(), "not yet") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) < 2 || !strings.Contains(lines[0], "still waiting for the thing") || !strings.Contains(lines[0], "not yet") {
		t.Fatalf("progress = %q", lines)
	}
}
