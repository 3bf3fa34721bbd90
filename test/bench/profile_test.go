package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHeapAtPeak: the restarted process's heap is taken again each time its RSS has grown by a tenth over the RSS
// of the last one taken, not as it falls back or creeps up, and the last one is kept with its summary.
func TestHeapAtPeak(t *testing.T) {
	var heaps atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		heaps.Add(1)
		pprof.Handler("heap").ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p, err := newProfiler(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	p.add("controller", srv.Client(), srv.URL+"/debug/pprof/")

	const mib = 1 << 20
	// Taken at 100 (the first), 111 (a tenth over 100), 200 and 250; not at 105, 150 (a fall) or the 250s after.
	readings := []int64{100, 105, 111, 200, 150, 250}
	var mu sync.Mutex
	read, polled := 0, make(chan struct{})
	rss := func() (usage, error) {
		mu.Lock()
		defer mu.Unlock()
		if read == len(readings)+3 {
			close(polled)
		}
		v := readings[min(read, len(readings)-1)]
		read++
		return usage{RSSBytes: v * mib}, nil
	}
	stop := p.heapAtPeak(t.Context(), "restart-controller", "controller", rss, time.Millisecond)
	select {
	case <-polled:
	case <-time.After(30 * time.Second):
		t.Fatal("RSS not read")
	}
	stop()
	if got := heaps.Load(); got != 4 {
		t.Errorf("%d heap profiles taken, want 4", got)
	}
	base := filepath.Join(p.dir, "restart-controller-controller-peak-heap")
	for _, f := range []string{base + ".pb.gz", base + ".txt"} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(base + ".pb.gz.part"); !os.IsNotExist(err) {
		t.Errorf("a partial profile is left: %v", err)
	}
}
