package hubmanager_test

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
)

// TestOwnConnection: clients of one rest config share one HTTP/2 connection (client-go caches the transport);
// a client of OwnConnection's copy opens another.
func TestOwnConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
		}
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}}
	own := hubmanager.OwnConnection(cfg)

	for _, step := range []struct {
		name  string
		cfg   *rest.Config
		conns int32
	}{
		{"a client of the config", cfg, 1},
		{"another client of the config", cfg, 1},
		{"a client of the copy", own, 2},
		{"a client of the config again", cfg, 2},
	} {
		hc, err := rest.HTTPClientFor(step.cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", step.name, resp.Status)
		}
		if got := conns.Load(); got != step.conns {
			t.Errorf("after %s: %d connections, want %d", step.name, got, step.conns)
		}
	}
	if cfg.Dial != nil {
		t.Error("OwnConnection changed the config it copied")
	}
}
