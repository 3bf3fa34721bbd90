package console

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are the console's flags of `argocd-pull server`.
type Options struct {
	// RedisAddress is where the redis proxy listens for argocd-server (its --redis); empty turns it off.
	RedisAddress string
	// RedisUpstream is the hub's redis, which answers everything the console does not.
	RedisUpstream string
	// ProxyAddress is where the managed clusters' API proxy listens (the cluster secrets' proxyUrl); empty
	// turns it off.
	ProxyAddress string
	// HubKubeconfig reaches the hub's API (the in-cluster config when empty): the console reads Applications'
	// metadata and its TLS Secret there.
	HubKubeconfig string
	// TLSSecret is the namespace/name of the Secret with the proxy's serving certificate and the console CA.
	TLSSecret string
	// ArgoCDNamespace is the namespace argocd-server runs in.
	ArgoCDNamespace string
	// RequestTimeout bounds the wait for an agent's answer.
	RequestTimeout time.Duration
	// HoldFor is how long an answer is held for the next request of the same entry.
	HoldFor time.Duration
}

// DefaultTLSSecret is the Secret the GitOpsCluster controller keeps the console's TLS in.
const DefaultTLSSecret = "argocd/argocd-pull-console-tls" //nolint:gosec // a Secret's name

// NewOptions returns the defaults: the console off.
func NewOptions() Options {
	return Options{TLSSecret: DefaultTLSSecret, ArgoCDNamespace: "argocd", RequestTimeout: 15 * time.Second, HoldFor: 2 * time.Second}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RedisAddress, "console-redis-bind-address", o.RedisAddress,
		"Address of the console's redis proxy, for the hub's argocd-server (--redis); empty: no redis proxy")
	fs.StringVar(&o.RedisUpstream, "console-redis-upstream", o.RedisUpstream, "The hub's redis (host:port), behind the console's redis proxy")
	fs.StringVar(&o.ProxyAddress, "console-proxy-bind-address", o.ProxyAddress,
		"Address of the console's proxy to the managed clusters' API (the proxyUrl of the hub's cluster secrets); empty: no proxy")
	fs.StringVar(&o.HubKubeconfig, "hub-kubeconfig", o.HubKubeconfig, "Kubeconfig of the hub, for the console (in-cluster config when empty)")
	fs.StringVar(&o.TLSSecret, "console-tls-secret", o.TLSSecret,
		"namespace/name of the hub Secret with the console proxy's serving certificate (tls.crt, tls.key) and the console CA (ca.crt)")
	fs.StringVar(&o.ArgoCDNamespace, "console-argocd-namespace", o.ArgoCDNamespace, "Namespace the hub's argocd-server runs in")
	fs.DurationVar(&o.RequestTimeout, "console-request-timeout", o.RequestTimeout, "How long the console waits for an agent's answer")
	fs.DurationVar(&o.HoldFor, "console-hold-answers", o.HoldFor, "How long an agent's answer is held for the next request of the same entry (0: never)")
}

// Enabled reports whether a console door is open.
func (o *Options) Enabled() bool { return o.RedisAddress != "" || o.ProxyAddress != "" }

// Validate checks the flags.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if o.RedisAddress != "" {
		if _, _, err := net.SplitHostPort(o.RedisUpstream); err != nil {
			errs = append(errs, fmt.Errorf("--console-redis-upstream must be host:port of the hub's redis with --console-redis-bind-address: %w", err))
		}
	}
	if o.ProxyAddress != "" {
		if ns, name, ok := strings.Cut(o.TLSSecret, "/"); !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Errorf("--console-tls-secret must be namespace/name, not %q", o.TLSSecret))
		}
	}
	if o.ArgoCDNamespace == "" {
		errs = append(errs, errors.New("--console-argocd-namespace must not be empty"))
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, errors.New("--console-request-timeout must be positive"))
	}
	if o.HoldFor < 0 {
		errs = append(errs, errors.New("--console-hold-answers must not be negative"))
	}
	return errors.Join(errs...)
}

// Doors are the console's listeners' servers, built from Options.
type Doors struct {
	Hub   *Hub
	Redis *RedisProxy
	Kube  *KubeProxy
}

// Build builds the console's doors with clients of the hub.
func (o *Options) Build() (*Doors, error) {
	cfg, err := o.hubConfig()
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub metadata client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	hub := NewHub(o.RequestTimeout)
	d := &Doors{Hub: hub}
	if o.RedisAddress != "" {
		c := &Console{Hub: hub, Targets: NewHubTargets(meta, 16384, 30*time.Second), ArgoCDNamespace: o.ArgoCDNamespace, HoldFor: o.HoldFor}
		d.Redis = &RedisProxy{Console: c, Upstream: o.RedisUpstream}
	}
	if o.ProxyAddress != "" {
		ns, name, _ := strings.Cut(o.TLSSecret, "/")
		secret := &SecretTLS{Client: kube, Namespace: ns, Name: name, Refresh: 10 * time.Second}
		d.Kube = &KubeProxy{Hub: hub, TLS: secret.Config}
	}
	return d, nil
}

func (o *Options) hubConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.HubKubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load hub kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}
