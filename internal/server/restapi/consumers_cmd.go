package restapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/envflag"
)

// EnvPrefix prefixes the environment variable of every client flag: --token-file is
// ARGOCD_PULL_CLIENT_TOKEN_FILE.
const EnvPrefix = "ARGOCD_PULL_CLIENT_"

// ClientOptions are the flags of the commands that call a server's REST API: where the server is and how to
// authenticate.
type ClientOptions struct {
	Server    string
	TokenFile string
	CAFile    string
	CertFile  string
	KeyFile   string
	Timeout   time.Duration
	envErr    error
	client    *Client
}

// AddFlags registers the flags.
func (o *ClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Server, "server", "http://127.0.0.1:8000", "URL of the server's HTTP listener")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "File holding an admin bearer token")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "CA bundle that verifies the server's certificate")
	fs.StringVar(&o.CertFile, "cert-file", o.CertFile, "Client certificate (mTLS)")
	fs.StringVar(&o.KeyFile, "key-file", o.KeyFile, "Key of the client certificate")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "Timeout of each request")
	o.envErr = envflag.Apply(fs, EnvPrefix)
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

// Client returns the REST client the options describe.
func (o *ClientOptions) Client() (*Client, error) {
	if o.client != nil {
		return o.client, nil
	}
	c, err := New(Config{URL: o.Server, TokenFile: o.TokenFile, Timeout: o.Timeout,
		TLS: TLS{CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile}})
	if err != nil {
		return nil, err
	}
	o.client = c
	return c, nil
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
	if !IsConsumerName(o.Name) {
		return errors.Join(o.ClientOptions.Validate(), fmt.Errorf("--name %q is not a DNS label", o.Name))
	}
	return o.ClientOptions.Validate()
}

// Run creates the consumer.
func (o *ConsumerCreateOptions) Run(ctx context.Context) error {
	client, err := o.Client()
	if err != nil {
		return err
	}
	c, err := client.CreateConsumer(ctx, Consumer{Name: o.Name, Labels: o.Labels})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(output(o.Out), "consumer %s created (id %s)\n", c.Name, c.ID)
	return err
}

// ConsumerListOptions configures `argocd-pull server consumers list`.
type ConsumerListOptions struct {
	ClientOptions
	Out io.Writer
}

// Run lists every consumer, page by page.
func (o *ConsumerListOptions) Run(ctx context.Context) error {
	client, err := o.Client()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(output(o.Out), 0, 4, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "NAME\tID\tLABELS\tAGENTS\tCREATED"); err != nil {
		return err
	}
	const size = 500
	for page := 1; ; page++ {
		list, err := ListPage[Consumer](ctx, client, ConsumersPath, Page{Page: page, Size: size})
		if err != nil {
			return err
		}
		for _, c := range list.Items {
			agents := "-"
			if c.ConnectedAgents != nil {
				agents = strconv.Itoa(*c.ConnectedAgents)
			}
			if _, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.ID, formatLabels(c.Labels), agents, c.CreatedAt.Format(time.RFC3339)); err != nil {
				return err
			}
		}
		if len(list.Items) == 0 || page*size >= list.Total {
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
	client, err := o.Client()
	if err != nil {
		return err
	}
	if err := client.DeleteConsumer(ctx, o.Name); err != nil {
		return err
	}
	_, err = fmt.Fprintf(output(o.Out), "consumer %s deleted\n", o.Name)
	return err
}

func output(w io.Writer) io.Writer {
	if w == nil {
		return os.Stdout
	}
	return w
}
