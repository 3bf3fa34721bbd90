package loopback

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPageWaitsForTheScripts: a page that draws what it shows from an API answer that comes seconds after its
// load event (as Argo CD's pages on a loaded machine) is read once it shows it, and its screenshot has the
// window's size.
func TestPageWaitsForTheScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`<html><body><p id="tree">Loading...</p><script>
fetch("/api/tree").then(r => r.text()).then(t => { document.getElementById("tree").textContent = t; });
</script></body></html>`))
	})
	mux.HandleFunc("GET /api/tree", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(3 * time.Second)
		_, _ = w.Write([]byte("guestbook-ui-pod"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	browser, err := NewBrowser(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	page, err := browser.Open(ctx, srv.URL+"/", 640, 480)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	first, err := page.DOM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(first, "guestbook-ui-pod") {
		t.Fatalf("the answer is in the document before it was sent:\n%s", first)
	}
	dom, err := page.WaitDOM(ctx, time.Minute, DOMContains("guestbook-ui-pod"))
	if err != nil {
		t.Fatalf("%v:\n%s", err, dom)
	}
	if _, err := page.WaitDOM(ctx, time.Second, DOMContains("never shown")); err == nil || !strings.Contains(err.Error(), `"never shown"`) {
		t.Errorf("waiting for what the page never shows: %v", err)
	}

	png := filepath.Join(t.TempDir(), "page.png")
	if err := page.Screenshot(ctx, png); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 24 {
		t.Fatalf("the screenshot is no PNG: %.16q", data)
	}
	if w, h := binary.BigEndian.Uint32(data[16:20]), binary.BigEndian.Uint32(data[20:24]); w != 640 || h != 480 {
		t.Errorf("screenshot %d×%d, want 640×480", w, h)
	}

	page.Close()
	if _, err := os.Stat(page.profile); !os.IsNotExist(err) {
		t.Errorf("the profile outlives the page: %v", err)
	}
}
