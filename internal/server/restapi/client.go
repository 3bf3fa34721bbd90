package restapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// TLS is what a client trusts and presents: PEM data, or files that hold it (the data wins).
type TLS struct {
	CAFile, CertFile, KeyFile string
	CAData, CertData, KeyData []byte
}

// Config builds the TLS configuration: the CA as the only root when one is given (the system's roots
// otherwise), and the client certificate when one is given.
func (t TLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	ca, err := pemOf(t.CAData, t.CAFile, "CA")
	if err != nil {
		return nil, err
	}
	if len(ca) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("the CA %s holds no PEM certificate", cmp.Or(t.CAFile, "data"))
		}
	}
	cert, err := pemOf(t.CertData, t.CertFile, "client certificate")
	if err != nil {
		return nil, err
	}
	key, err := pemOf(t.KeyData, t.KeyFile, "client key")
	if err != nil {
		return nil, err
	}
	if (len(cert) == 0) != (len(key) == 0) {
		return nil, errors.New("a client certificate and its key go together")
	}
	if len(cert) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func pemOf(data []byte, file, what string) ([]byte, error) {
	if len(data) > 0 || file == "" {
		return data, nil
	}
	b, err := os.ReadFile(file) //nolint:gosec // a file the user named
	if err != nil {
		return nil, fmt.Errorf("read %s file: %w", what, err)
	}
	return b, nil
}

// Config says where a server is and how to authenticate to it.
type Config struct {
	// URL is the server's HTTP listener, such as https://127.0.0.1:8000.
	URL string
	// Token is a bearer token. Without one, TokenFile names a file that holds it, read at every request so
	// that a rotated token is taken up.
	Token, TokenFile string
	TLS              TLS
	// Timeout bounds each request; 30 seconds when zero.
	Timeout time.Duration
}

// Client calls the REST API of argocd-pull server or of Maestro.
type Client struct {
	base      string
	token     string
	tokenFile string
	http      *http.Client
}

// New returns a client.
func New(c Config) (*Client, error) {
	if _, err := url.Parse(c.URL); err != nil || c.URL == "" {
		return nil, fmt.Errorf("the server URL must be a URL, got %q", c.URL)
	}
	tlsConfig, err := c.TLS.Config()
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return &Client{base: strings.TrimSuffix(c.URL, "/"), token: c.Token, tokenFile: c.TokenFile,
		http: &http.Client{Transport: transport, Timeout: timeout}}, nil
}

// URL is the server's address.
func (c *Client) URL() string { return c.base }

// Ready asks the server whether it is ready (its /readyz: serving, with its database reachable); an error
// says why not.
func (c *Client) Ready(ctx context.Context) error {
	err := c.Do(ctx, http.MethodGet, "/readyz", nil, nil)
	var se *StatusError
	if errors.As(err, &se) {
		return fmt.Errorf("the server is not ready: %s: %s", se.Status, se.Reason)
	}
	if err != nil {
		return fmt.Errorf("ask the server whether it is ready: %w", err)
	}
	return nil
}

// HTTPClient is the client's HTTP client, which trusts the server, for the server's other endpoints
// (/readyz, /metrics).
func (c *Client) HTTPClient() *http.Client { return c.http }

// StatusError is the answer of the server to a request it did not serve.
type StatusError struct {
	Method, Path string
	// Code is the HTTP status code, Status its text.
	Code   int
	Status string
	// Reason is the server's explanation.
	Reason string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Reason)
}

// maxAnswer bounds the answer read from the server: a page of 1,000 works with their statuses fits many
// times over.
const maxAnswer = 256 << 20

// Do sends a request with a JSON body (none when body is nil) and decodes the JSON answer into out (when not
// nil). An answer other than 2xx is a *StatusError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.authorize(req); err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		return statusError(method, path, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) authorize(req *http.Request) error {
	token := c.token
	if token == "" && c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return fmt.Errorf("read token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

// statusError reads the server's reason: Maestro's error shape, or the answer's text.
func statusError(method, path string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	reason := strings.TrimSpace(string(body))
	var e Error
	if json.Unmarshal(body, &e) == nil && e.Reason != "" {
		reason = e.Reason
	}
	return &StatusError{Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Reason: reason}
}

// HasStatus reports whether err is the server's answer with that HTTP status code.
func HasStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// CreateConsumer registers a consumer.
func (c *Client) CreateConsumer(ctx context.Context, in Consumer) (Consumer, error) {
	var out Consumer
	err := c.Do(ctx, http.MethodPost, ConsumersPath, in, &out)
	return out, err
}

// EnsureConsumer registers a consumer unless it exists already.
func (c *Client) EnsureConsumer(ctx context.Context, name string) error {
	_, err := c.CreateConsumer(ctx, Consumer{Name: name})
	if err != nil && !HasStatus(err, http.StatusConflict) {
		return fmt.Errorf("create consumer %s: %w", name, err)
	}
	return nil
}

// GetConsumer reads a consumer by name or id.
func (c *Client) GetConsumer(ctx context.Context, nameOrID string) (Consumer, error) {
	var out Consumer
	err := c.Do(ctx, http.MethodGet, ConsumersPath+"/"+url.PathEscape(nameOrID), nil, &out)
	return out, err
}

// DeleteConsumer deletes a consumer, by name or id; the server refuses while it has works.
func (c *Client) DeleteConsumer(ctx context.Context, nameOrID string) error {
	return c.Do(ctx, http.MethodDelete, ConsumersPath+"/"+url.PathEscape(nameOrID), nil, nil)
}

// Page selects one page of a list: page counts from 1.
type Page struct {
	Page, Size int
	// Search is Maestro's search: `column = 'value'` terms joined by `and` (resource bundles only).
	Search string
	// After asks argocd-pull server for the page after the item with this id (a keyset walk; resource bundles
	// only). Maestro does not know it and pages by Page alone.
	After string
	// Fields selects the fields of each item (Maestro's `fields`; all of them when empty).
	Fields []string
}

func (p Page) query() string {
	q := url.Values{}
	if p.Search != "" {
		q.Set("search", p.Search)
	}
	if p.Page > 0 {
		q.Set("page", strconv.Itoa(p.Page))
	}
	if p.Size > 0 {
		q.Set("size", strconv.Itoa(p.Size))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if len(p.Fields) > 0 {
		q.Set("fields", strings.Join(p.Fields, ","))
	}
	return q.Encode()
}

// ListPage reads one page of a collection (ConsumersPath, ResourceBundlesPath) into items of type T: a
// caller that needs only some fields of an item, or typed ones, decodes into its own type.
func ListPage[T any](ctx context.Context, c *Client, path string, p Page) (*List[T], error) {
	out := &List[T]{}
	if err := c.Do(ctx, http.MethodGet, path+"?"+p.query(), nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// EachResourceBundle calls fn with every resource bundle that search matches, decoded into T, size at a time,
// with the fields named (all of them when none are).
// It walks by keyset (after the last id, which id returns) on argocd-pull server and by page number on a
// Maestro, which does not know the keyset, and ends at an empty page: bundles removed while it walks (a mass
// delete) must not shift the rest out of the pages, nor make the first page's total stale. A bundle seen twice
// (a Maestro's pages shifting the other way) is passed once.
func EachResourceBundle[T any](ctx context.Context, c *Client, search string, fields []string, size int, id func(T) string, fn func(T) error) error {
	seen := map[string]bool{}
	after := ""
	for page := 1; ; page++ {
		list, err := ListPage[T](ctx, c, ResourceBundlesPath, Page{Page: page, Size: size, Search: search, After: after, Fields: fields})
		if err != nil {
			return fmt.Errorf("list resource bundles page %d: %w", page, err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		for _, item := range list.Items {
			if seen[id(item)] {
				continue
			}
			seen[id(item)] = true
			if err := fn(item); err != nil {
				return err
			}
		}
		after = id(list.Items[len(list.Items)-1])
	}
}

// CountResourceBundles returns how many works the server holds (those whose deletion is under way
// included).
func (c *Client) CountResourceBundles(ctx context.Context) (int, error) {
	list, err := ListPage[struct{}](ctx, c, ResourceBundlesPath, Page{Size: 1})
	if err != nil {
		return 0, err
	}
	return list.Total, nil
}

// SourceSearch is the search of every resource bundle of a source.
func SourceSearch(source string) string {
	return fmt.Sprintf("source = '%s'", strings.ReplaceAll(source, "'", "''"))
}
