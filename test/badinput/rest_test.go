package badinput

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
)

// restCase is a bad request to the server's REST API and the answer its caller gets: the HTTP status and
// Maestro's error, with its code and reason.
type restCase struct {
	kind                string
	method, path, body  string
	contentType         string
	noToken             bool
	status              int
	code, reasonContain string
}

func restCases() []restCase {
	consumers, bundles := restapi.ConsumersPath, restapi.ResourceBundlesPath
	search := func(q string) string { return bundles + "?search=" + url.QueryEscape(q) }
	return []restCase{
		{kind: "body that is not application/json", method: http.MethodPost, path: consumers, body: "name=cluster9",
			contentType: "application/x-www-form-urlencoded", status: http.StatusUnsupportedMediaType, code: "maestro-17",
			reasonContain: `the body must be application/json, not "application/x-www-form-urlencoded"`},
		{kind: "body that is not JSON", method: http.MethodPost, path: consumers, body: `{"name": "cluster9"`,
			contentType: "application/json", status: http.StatusBadRequest, code: "maestro-17", reasonContain: "decode consumer: unexpected EOF"},
		{kind: "consumer name that is no DNS label", method: http.MethodPost, path: consumers, body: `{"name": "Cluster_9"}`,
			contentType: "application/json", status: http.StatusBadRequest, code: "maestro-8", reasonContain: `name "Cluster_9" is not a DNS label`},
		{kind: "consumer that already exists", method: http.MethodPost, path: consumers, body: `{"name": "cluster1"}`,
			contentType: "application/json", status: http.StatusConflict, code: "maestro-6"},
		{kind: "search with an operator the server does not support", method: http.MethodGet, path: search("source like 'h%'"),
			status: http.StatusBadRequest, code: "maestro-23", reasonContain: "failed to parse search query"},
		{kind: "search on a column the server does not support", method: http.MethodGet, path: search("labels = 'x'"),
			status: http.StatusBadRequest, code: "maestro-23", reasonContain: `unsupported search column "labels"`},
		{kind: "search joined with or", method: http.MethodGet, path: search("source = 'a' or source = 'b'"),
			status: http.StatusBadRequest, code: "maestro-23", reasonContain: "failed to parse search query"},
		{kind: "page that is no positive integer", method: http.MethodGet, path: bundles + "?page=0",
			status: http.StatusBadRequest, code: "maestro-8", reasonContain: `page must be a positive integer, got "0"`},
		{kind: "field selection with a field a resource bundle does not have", method: http.MethodGet, path: bundles + "?fields=name,spec",
			status: http.StatusBadRequest, code: "maestro-8", reasonContain: `fields: a resource bundle has no field "spec"`},
		{kind: "request without a token or certificate", method: http.MethodGet, path: consumers, noToken: true,
			status: http.StatusUnauthorized, code: "maestro-15", reasonContain: "no client certificate or bearer token"},
		{kind: "resource bundle that does not exist", method: http.MethodGet, path: bundles + "/no-such-id",
			status: http.StatusNotFound, code: "maestro-7"},
	}
}

// TestRESTInputs sends each bad request to the real server over TLS, as the admin unless the case says
// otherwise, and checks the status and Maestro's error shape the caller gets.
func TestRESTInputs(t *testing.T) {
	e := fleet(t)
	for _, c := range restCases() {
		t.Run(strings.ReplaceAll(c.kind, " ", "_"), func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), c.method, "https://"+e.Server.HTTP+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			if !c.noToken {
				req.Header.Set("Authorization", "Bearer "+e.AdminToken)
			}
			resp, err := e.ServerClient().HTTPClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			var got restapi.Error
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s: the body is no Maestro error: %v: %s", resp.Status, err, body)
			}
			if resp.StatusCode != c.status || got.Kind != "Error" || got.Code != c.code || !strings.Contains(got.Reason, c.reasonContain) {
				t.Errorf("got %s %+v, want %d %s with %q", resp.Status, got, c.status, c.code, c.reasonContain)
			}
		})
	}
}
