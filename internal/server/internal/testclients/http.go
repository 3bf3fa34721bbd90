package testclients

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AgentHandler serves an agent's controls: GET /work?name=, POST /message?name=&message=,
// POST /hold-deletes?hold=, POST /silent?silent=, GET /received.
func AgentHandler(a *Agent) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, StateOf(a.Work(r.Context(), r.URL.Query().Get("name"))))
	})
	mux.HandleFunc("POST /message", func(_ http.ResponseWriter, r *http.Request) {
		a.SetMessage(r.URL.Query().Get("name"), r.URL.Query().Get("message"))
	})
	mux.HandleFunc("POST /hold-deletes", func(_ http.ResponseWriter, r *http.Request) {
		a.HoldDeletes(r.URL.Query().Get("hold") == "true")
	})
	mux.HandleFunc("POST /silent", func(_ http.ResponseWriter, r *http.Request) {
		a.SetSilent(r.URL.Query().Get("silent") == "true")
	})
	mux.HandleFunc("GET /received", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.Received())
	})
	return mux
}

// SourceHandler serves a source's controls: POST /apply?cluster=&name=&configMaps=a,b,
// POST /delete?cluster=&name=, GET /work?cluster=&name=. A failed call answers 503 with the error.
func SourceHandler(s *Source) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /apply", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fail(w, s.Apply(r.Context(), q.Get("cluster"), q.Get("name"), strings.Split(q.Get("configMaps"), ",")...))
	})
	mux.HandleFunc("POST /delete", func(w http.ResponseWriter, r *http.Request) {
		fail(w, s.Delete(r.Context(), r.URL.Query().Get("cluster"), r.URL.Query().Get("name")))
	})
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Work(r.Context(), r.URL.Query().Get("cluster"), r.URL.Query().Get("name"))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, st)
	})
	return mux
}

func fail(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Remote controls a client served by AgentHandler or SourceHandler in another process.
type Remote struct {
	base   string
	client *http.Client
}

// NewRemote returns a Remote for the client served at addr (host:port).
func NewRemote(addr string) *Remote {
	return &Remote{base: "http://" + addr, client: &http.Client{Timeout: time.Minute}}
}

func (r *Remote) call(ctx context.Context, method, path string, query url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

// Healthy reports whether the client serves its controls.
func (r *Remote) Healthy(ctx context.Context) error {
	return r.call(ctx, http.MethodGet, "/healthz", nil, nil)
}

// Work returns what the client holds of a work (an agent ignores the cluster).
func (r *Remote) Work(ctx context.Context, cluster, name string) (WorkState, error) {
	var st WorkState
	err := r.call(ctx, http.MethodGet, "/work", url.Values{"cluster": {cluster}, "name": {name}}, &st)
	return st, err
}

// Apply publishes a work of ConfigMaps through a source.
func (r *Remote) Apply(ctx context.Context, cluster, name string, configMaps ...string) error {
	return r.call(ctx, http.MethodPost, "/apply",
		url.Values{"cluster": {cluster}, "name": {name}, "configMaps": {strings.Join(configMaps, ",")}}, nil)
}

// Delete publishes the deletion of a work through a source.
func (r *Remote) Delete(ctx context.Context, cluster, name string) error {
	return r.call(ctx, http.MethodPost, "/delete", url.Values{"cluster": {cluster}, "name": {name}}, nil)
}

// SetMessage sets the message an agent reports for a work.
func (r *Remote) SetMessage(ctx context.Context, name, message string) error {
	return r.call(ctx, http.MethodPost, "/message", url.Values{"name": {name}, "message": {message}}, nil)
}

// HoldDeletes keeps an agent from confirming deletions while hold is set.
func (r *Remote) HoldDeletes(ctx context.Context, hold bool) error {
	return r.call(ctx, http.MethodPost, "/hold-deletes", url.Values{"hold": {strconv.FormatBool(hold)}}, nil)
}

// SetSilent keeps an agent from reporting while silent is set.
func (r *Remote) SetSilent(ctx context.Context, silent bool) error {
	return r.call(ctx, http.MethodPost, "/silent", url.Values{"silent": {strconv.FormatBool(silent)}}, nil)
}

// Received returns how many spec deliveries an agent counted.
func (r *Remote) Received(ctx context.Context) (int64, error) {
	var n int64
	err := r.call(ctx, http.MethodGet, "/received", nil, &n)
	return n, err
}
