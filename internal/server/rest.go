package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// defaultPageSize is Maestro's default page size.
const defaultPageSize = 100

// Maestro's error codes.
const (
	errCodeForbidden       = 4
	errCodeConflict        = 6
	errCodeNotFound        = 7
	errCodeValidation      = 8
	errCodeGeneral         = 9
	errCodeUnauthenticated = 15
	errCodeMalformed       = 17
	errCodeBadSearch       = 23
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+restapi.BasePath+"/consumers", s.authed(s.listConsumers))
	mux.HandleFunc("POST "+restapi.BasePath+"/consumers", s.authed(s.createConsumer))
	mux.HandleFunc("GET "+restapi.BasePath+"/consumers/{id}", s.authed(s.getConsumer))
	mux.HandleFunc("DELETE "+restapi.BasePath+"/consumers/{id}", s.authed(s.deleteConsumer))
	mux.HandleFunc("GET "+restapi.BasePath+"/resource-bundles", s.authed(s.listBundles))
	mux.HandleFunc("GET "+restapi.BasePath+"/resource-bundles/{id}", s.authed(s.getBundle))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", s.readyz)
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		msg := "not ready: starting or shutting down"
		if err := s.waiting.Load(); err != nil {
			msg = "not ready: waiting for the database: " + (*err).Error()
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	if err := s.store.Ping(r.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

type authedHandler func(w http.ResponseWriter, r *http.Request, id Identity)

func (s *Server) authed(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeError(w, r, http.StatusServiceUnavailable, errCodeGeneral, "the server is starting or shutting down")
			return
		}
		id, err := s.auth.httpIdentity(r)
		if err != nil {
			writeError(w, r, http.StatusUnauthorized, errCodeUnauthenticated, err.Error())
			return
		}
		h(w, r, id)
	}
}

func writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.FromContext(r.Context()).V(2).Info("Failed to write a response", "path", r.URL.Path, "err", err)
	}
}

func writeError(w http.ResponseWriter, r *http.Request, httpCode, code int, reason string) {
	writeJSON(w, r, httpCode, restapi.Error{ID: strconv.Itoa(code), Kind: "Error", Href: fmt.Sprintf("%s/errors/%d", restapi.BasePath, code),
		Code: fmt.Sprintf("maestro-%d", code), Reason: reason})
}

// writeStoreError answers with the REST error that matches a store error.
func writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, errCodeNotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		writeError(w, r, http.StatusConflict, errCodeConflict, err.Error())
	default:
		klog.FromContext(r.Context()).Error(err, "REST request failed", "path", r.URL.Path)
		writeError(w, r, http.StatusInternalServerError, errCodeGeneral, "the server failed to serve the request; see its log")
	}
}

func forbid(w http.ResponseWriter, r *http.Request, id Identity, what string) {
	writeError(w, r, http.StatusForbidden, errCodeForbidden, fmt.Sprintf("%s may not %s", id, what))
}

// pageParams reads Maestro's page (from 1) and size, clamping size to the server's maximum.
func (s *Server) pageParams(r *http.Request) (page, size int, err error) {
	page, size = 1, defaultPageSize
	if v := r.URL.Query().Get("page"); v != "" {
		if page, err = strconv.Atoi(v); err != nil || page < 1 {
			return 0, 0, fmt.Errorf("page must be a positive integer, got %q", v)
		}
	}
	if v := r.URL.Query().Get("size"); v != "" {
		if size, err = strconv.Atoi(v); err != nil || size < 0 {
			return 0, 0, fmt.Errorf("size must be a non-negative integer, got %q", v)
		}
	}
	return page, min(size, s.opts.MaxPageSize), nil
}

func presentConsumer(c store.Consumer) restapi.Consumer {
	return restapi.Consumer{ID: c.ID, Kind: "Consumer", Href: restapi.BasePath + "/consumers/" + c.ID, Name: c.Name,
		Labels: c.Labels, CreatedAt: &c.CreatedAt, UpdatedAt: &c.UpdatedAt, ConnectedAgents: &c.ConnectedAgents}
}

func (s *Server) listConsumers(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.isAdmin() && id.Kind != KindSource {
		forbid(w, r, id, "list consumers")
		return
	}
	page, size, err := s.pageParams(r)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, errCodeValidation, err.Error())
		return
	}
	list, total, err := s.store.ListConsumers(r.Context(), (page-1)*size, size)
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	out := restapi.List[restapi.Consumer]{Kind: "ConsumerList", Page: page, Size: len(list), Total: total, Items: []restapi.Consumer{}}
	for _, c := range list {
		out.Items = append(out.Items, presentConsumer(c))
	}
	writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) createConsumer(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.isAdmin() {
		forbid(w, r, id, "create consumers")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, r, http.StatusUnsupportedMediaType, errCodeMalformed, fmt.Sprintf("the body must be application/json, not %q", ct))
			return
		}
	}
	var in restapi.Consumer
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		writeError(w, r, http.StatusBadRequest, errCodeMalformed, "decode consumer: "+err.Error())
		return
	}
	if in.ID != "" {
		writeError(w, r, http.StatusBadRequest, errCodeValidation, "id must be empty: the server assigns it")
		return
	}
	if !restapi.IsConsumerName(in.Name) {
		writeError(w, r, http.StatusBadRequest, errCodeValidation, fmt.Sprintf("name %q is not a DNS label", in.Name))
		return
	}
	c, err := s.store.CreateConsumer(r.Context(), store.Consumer{Name: in.Name, Labels: in.Labels})
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusCreated, presentConsumer(c))
}

func (s *Server) getConsumer(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.isAdmin() && id.Kind != KindSource {
		forbid(w, r, id, "read consumers")
		return
	}
	c, err := s.store.GetConsumer(r.Context(), r.PathValue("id"))
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, presentConsumer(c))
}

func (s *Server) deleteConsumer(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.isAdmin() {
		forbid(w, r, id, "delete consumers")
		return
	}
	if err := s.store.DeleteConsumer(r.Context(), r.PathValue("id")); err != nil {
		writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// searchAnd splits a search into its terms.
var searchAnd = regexp.MustCompile(`(?i)\s+and\s+`)

// searchTerm matches one `column = 'value'` of a search; values may not contain quotes.
var searchTerm = regexp.MustCompile(`^\s*([a-z_]+)\s*=\s*'([^']*)'\s*$`)

// parseSearch reads the subset of Maestro's search language the server supports: `column = 'value'`
// terms joined by `and`, over source, consumer_name and name.
func parseSearch(search string) (store.BundleQuery, error) {
	var q store.BundleQuery
	if strings.TrimSpace(search) == "" {
		return q, nil
	}
	for _, term := range searchAnd.Split(search, -1) {
		m := searchTerm.FindStringSubmatch(term)
		if m == nil {
			return q, fmt.Errorf("cannot parse %q: use column = 'value' terms joined by and", term)
		}
		var field *string
		switch m[1] {
		case "source":
			field = &q.Source
		case "consumer_name":
			field = &q.Consumer
		case "name":
			field = &q.Name
		default:
			return q, fmt.Errorf("unsupported search column %q: use source, consumer_name or name", m[1])
		}
		if *field != "" && *field != m[2] {
			return q, fmt.Errorf("column %s is given twice", m[1])
		}
		*field = m[2]
	}
	return q, nil
}

func (s *Server) listBundles(w http.ResponseWriter, r *http.Request, id Identity) {
	q, err := parseSearch(r.URL.Query().Get("search"))
	if err != nil {
		writeError(w, r, http.StatusBadRequest, errCodeBadSearch, "failed to parse search query: "+err.Error())
		return
	}
	if !id.isAdmin() && (id.Kind != KindSource || q.Source != id.Name) {
		forbid(w, r, id, "list resource bundles without the search term source = '"+id.Name+"'")
		return
	}
	page, size, err := s.pageParams(r)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, errCodeValidation, err.Error())
		return
	}
	fields, err := parseBundleFields(r.URL.Query().Get("fields"))
	if err != nil {
		writeError(w, r, http.StatusBadRequest, errCodeValidation, err.Error())
		return
	}
	// `after` (an extension to Maestro's API) walks by keyset: the page after the item with that id.
	q.Limit, q.Offset, q.After = size, (page-1)*size, r.URL.Query().Get("after")
	q.WithoutSpec = fields != nil && !fields["manifests"] && !fields["delete_option"] && !fields["manifest_configs"]
	result, err := s.store.ListBundles(r.Context(), q)
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	items, err := presentBundles(result.Items, fields)
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, restapi.List[any]{Kind: "ResourceBundleList", Page: page, Size: len(items), Total: result.Total, Items: items})
}

// presentBundles renders a page of stored resources as the items of a resource bundle list, with the fields
// selected (all of them when fields is nil).
func presentBundles(bundles []store.Bundle, fields map[string]bool) ([]any, error) {
	items := make([]any, 0, len(bundles))
	for _, b := range bundles {
		item, err := presentBundle(b)
		if err != nil {
			return nil, err
		}
		if fields != nil {
			items = append(items, selectBundleFields(item, fields))
		} else {
			items = append(items, item)
		}
	}
	return items, nil
}

// bundleFields are the fields of a resource bundle, as a list's `fields` names them.
var bundleFields = []string{"id", "kind", "href", "name", "consumer_name", "version", "created_at", "updated_at",
	"deleted_at", "metadata", "manifests", "delete_option", "manifest_configs", "status"}

// parseBundleFields reads a list's `fields`, Maestro's comma-separated selection of the fields each item has: nil
// for all of them. id, kind and href always come. Without manifests, delete_option and manifest_configs the specs
// are not read from the database at all: a controller rebuilding its cache of 150,000 works needs their metadata
// and status, and the manifests are the bulk of each.
func parseBundleFields(v string) (map[string]bool, error) {
	if v == "" {
		return nil, nil
	}
	fields := map[string]bool{"id": true, "kind": true, "href": true}
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(bundleFields, f) {
			return nil, fmt.Errorf("fields: a resource bundle has no field %q (it has %s)", f, strings.Join(bundleFields, ", "))
		}
		fields[f] = true
	}
	return fields, nil
}

// selectBundleFields is the item with the selected fields alone; each is rendered as in the whole item.
func selectBundleFields(b restapi.ResourceBundle, fields map[string]bool) map[string]any {
	all := map[string]any{"id": b.ID, "kind": b.Kind, "href": b.Href, "name": b.Name, "consumer_name": b.ConsumerName,
		"version": b.Version, "created_at": b.CreatedAt, "updated_at": b.UpdatedAt}
	if b.DeletedAt != nil {
		all["deleted_at"] = b.DeletedAt
	}
	if len(b.Metadata) > 0 {
		all["metadata"] = b.Metadata
	}
	if len(b.Manifests) > 0 {
		all["manifests"] = b.Manifests
	}
	if len(b.DeleteOption) > 0 {
		all["delete_option"] = b.DeleteOption
	}
	if len(b.ManifestConfigs) > 0 {
		all["manifest_configs"] = b.ManifestConfigs
	}
	if len(b.Status) > 0 {
		all["status"] = b.Status
	}
	for k := range all {
		if !fields[k] {
			delete(all, k)
		}
	}
	return all
}

func (s *Server) getBundle(w http.ResponseWriter, r *http.Request, id Identity) {
	b, err := s.store.GetBundle(r.Context(), r.PathValue("id"))
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	if !id.isAdmin() && (id.Kind != KindSource || b.Source != id.Name) {
		forbid(w, r, id, "read resource bundle "+b.ID)
		return
	}
	item, err := presentBundle(b)
	if err != nil {
		writeStoreError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, item)
}

// presentBundle renders a stored resource as Maestro renders a resource bundle. The spec's fields and the
// status's are passed through as the source and the agent wrote them, not decoded and encoded again: numbers
// stay as they were written (a source that rebuilds its works from the list hashes their statuses, and an
// integer above 2^53 turned into a float would change the hash), and a list of 1,000 works costs a scan of their
// JSON instead of building every value (BenchmarkPresentBundles).
func presentBundle(b store.Bundle) (restapi.ResourceBundle, error) {
	out := restapi.ResourceBundle{ID: b.ID, Kind: "ResourceBundle", Href: restapi.BasePath + "/resource-bundles/" + b.ID, Name: b.Name,
		ConsumerName: b.Consumer, Version: b.Version, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt, DeletedAt: b.DeletedAt,
		Metadata: json.RawMessage(b.Meta)}
	// The spec is nil when the list left it out (store.BundleQuery.WithoutSpec).
	if b.Spec != nil {
		var spec struct {
			Manifests       json.RawMessage `json:"manifests"`
			DeleteOption    json.RawMessage `json:"deleteOption"`
			ManifestConfigs json.RawMessage `json:"manifestConfigs"`
		}
		if err := json.Unmarshal(b.Spec, &spec); err != nil {
			return out, fmt.Errorf("decode spec of resource bundle %s: %w", b.ID, err)
		}
		out.Manifests, out.DeleteOption, out.ManifestConfigs = nonEmpty(spec.Manifests), nonEmpty(spec.DeleteOption), nonEmpty(spec.ManifestConfigs)
	}
	if len(b.Status) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(b.Status, &out.Status); err != nil {
		return out, fmt.Errorf("decode status of resource bundle %s: %w", b.ID, err)
	}
	if out.Status == nil { // an agent reported a null status
		out.Status = map[string]json.RawMessage{}
	}
	out.Status["ObservedVersion"] = strconv.AppendInt(nil, b.StatusVersion, 10)
	out.Status["SequenceID"] = strconv.AppendQuote(nil, strconv.FormatInt(b.StatusSequence, 10))
	// An extension, the server's alone as the two above: a source that rebuilds its works from the list resyncs
	// with this hash instead of computing it for every work.
	delete(out.Status, "StatusHash")
	if b.StatusHash != "" {
		out.Status["StatusHash"] = strconv.AppendQuote(nil, b.StatusHash)
	}
	return out, nil
}

// nonEmpty is a JSON value, or nil when it is null or an empty array or object: a list leaves those out, as
// Maestro's does.
func nonEmpty(raw json.RawMessage) json.RawMessage {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	if (v[0] == '[' || v[0] == '{') && len(bytes.TrimSpace(v[1:len(v)-1])) == 0 {
		return nil
	}
	return v
}
