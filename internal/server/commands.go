package server

import (
	"bytes"
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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// MigrateOptions configures `argocd-pull server migrate`.
type MigrateOptions struct {
	DatabaseURL string
	envErr      error
}

// AddFlags registers the flags.
func (o *MigrateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DatabaseURL, "database-url", o.DatabaseURL, "PostgreSQL connection string")
	o.envErr = applyEnv(fs, EnvPrefix)
}

// Validate checks the options.
func (o *MigrateOptions) Validate() error {
	if o.DatabaseURL == "" {
		return errors.Join(o.envErr, errors.New("--database-url is required"))
	}
	return o.envErr
}

// Run applies the migrations.
func (o *MigrateOptions) Run(ctx context.Context) error {
	st, err := store.New(ctx, store.Config{URL: o.DatabaseURL, MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Migrate(ctx)
}

// ClientOptions are the flags of the REST client commands: where the server is and how to authenticate.
type ClientOptions struct {
	Server     string
	TokenFile  string
	CAFile     string
	CertFile   string
	KeyFile    string
	Timeout    time.Duration
	envErr     error
	httpClient *http.Client
}

// AddFlags registers the flags.
func (o *ClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Server, "server", "http://127.0.0.1:8000", "URL of the server's HTTP listener")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "File holding an admin bearer token")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "CA bundle that verifies the server's certificate")
	fs.StringVar(&o.CertFile, "cert-file", o.CertFile, "Client certificate (mTLS)")
	fs.StringVar(&o.KeyFile, "key-file", o.KeyFile, "Key of the client certificate")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "Timeout of each request")
	o.envErr = applyEnv(fs, "ARGOCD_PULL_CLIENT_")
}

// Validate checks the options.
func (o *ClientOptions) Validate() error {
	if _, err := url.Parse(o.Server); err != nil || o.Server == "" {
		return errors.Join(o.envErr, fmt.Errorf("--server must be a URL, got %q", o.Server))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.Join(o.envErr, errors.New("--cert-file and --key-file go together"))
	}
	return o.envErr
}

func (o *ClientOptions) client() (*http.Client, error) {
	if o.httpClient != nil {
		return o.httpClient, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no certificate", o.CAFile)
		}
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	o.httpClient = &http.Client{Timeout: o.Timeout, Transport: &http.Transport{TLSClientConfig: cfg}}
	return o.httpClient, nil
}

// do sends a request and decodes a JSON answer into out (when not nil), turning error answers into errors.
func (o *ClientOptions) do(ctx context.Context, method, path string, body, out any) error {
	client, err := o.client()
	if err != nil {
		return err
	}
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(o.Server, "/")+path, reader)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.TokenFile != "" {
		token, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return fmt.Errorf("read token file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		var e ErrorJSON
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Reason)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// ConsumerCreateOptions configures `argocd-pull server consumers create`.
type ConsumerCreateOptions struct {
	ClientOptions
	Name   string
	Labels map[string]string
	Out    io.Writer
}

// AddFlags registers the flags.
func (o *ConsumerCreateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", o.Name, "Consumer name: the managed cluster's name")
	fs.StringToStringVar(&o.Labels, "labels", o.Labels, "Labels of the consumer, key=value,...")
	o.ClientOptions.AddFlags(fs)
}

// Validate checks the options.
func (o *ConsumerCreateOptions) Validate() error {
	if !consumerName.MatchString(o.Name) {
		return errors.Join(o.ClientOptions.Validate(), fmt.Errorf("--name %q is not a DNS label", o.Name))
	}
	return o.ClientOptions.Validate()
}

// Run creates the consumer.
func (o *ConsumerCreateOptions) Run(ctx context.Context) error {
	var c ConsumerJSON
	if err := o.do(ctx, http.MethodPost, BasePath+"/consumers", ConsumerJSON{Name: o.Name, Labels: o.Labels}, &c); err != nil {
		return err
	}
	_, err := fmt.Fprintf(output(o.Out), "consumer %s created (id %s)\n", c.Name, c.ID)
	return err
}

// ConsumerListOptions configures `argocd-pull server consumers list`.
type ConsumerListOptions struct {
	ClientOptions
	Out io.Writer
}

// Run lists every consumer, page by page.
func (o *ConsumerListOptions) Run(ctx context.Context) error {
	tw := tabwriter.NewWriter(output(o.Out), 0, 4, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "NAME\tID\tLABELS\tCREATED"); err != nil {
		return err
	}
	for page := 1; ; page++ {
		var list List[ConsumerJSON]
		if err := o.do(ctx, http.MethodGet, fmt.Sprintf("%s/consumers?page=%d&size=500", BasePath, page), nil, &list); err != nil {
			return err
		}
		for _, c := range list.Items {
			if _, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.ID, formatLabels(c.Labels), c.CreatedAt.Format(time.RFC3339)); err != nil {
				return err
			}
		}
		if len(list.Items) == 0 || page*500 >= list.Total {
			break
		}
	}
	return tw.Flush()
}

func formatLabels(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

// ConsumerDeleteOptions configures `argocd-pull server consumers delete`.
type ConsumerDeleteOptions struct {
	ClientOptions
	Name string
	Out  io.Writer
}

// AddFlags registers the flags.
func (o *ConsumerDeleteOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", o.Name, "Name or id of the consumer to delete (it must have no works)")
	o.ClientOptions.AddFlags(fs)
}

// Validate checks the options.
func (o *ConsumerDeleteOptions) Validate() error {
	if o.Name == "" {
		return errors.Join(o.ClientOptions.Validate(), errors.New("--name is required"))
	}
	return o.ClientOptions.Validate()
}

// Run deletes the consumer.
func (o *ConsumerDeleteOptions) Run(ctx context.Context) error {
	if err := o.do(ctx, http.MethodDelete, BasePath+"/consumers/"+url.PathEscape(o.Name), nil, nil); err != nil {
		return err
	}
	_, err := fmt.Fprintf(output(o.Out), "consumer %s deleted\n", o.Name)
	return err
}

func output(w io.Writer) io.Writer {
	if w == nil {
		return os.Stdout
	}
	return w
}
