package gitopscluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/pki"
)

// The console's Secrets in the Argo CD namespace, and the certificates' lifetimes. A certificate is issued
// again when a third of its lifetime is left.
const (
	// ConsoleCASecret holds the console CA (tls.crt, tls.key), which issues the proxy's serving certificate and
	// the clusters' client certificates. Delete it to rotate the CA: everything is issued again.
	ConsoleCASecret = "argocd-pull-console-ca" //nolint:gosec // a Secret's name
	// ConsoleTLSSecret holds the proxy's serving certificate and the CA's certificate (tls.crt, tls.key,
	// ca.crt): argocd-pull server's --console-tls-secret.
	ConsoleTLSSecret = "argocd-pull-console-tls" //nolint:gosec // a Secret's name
	// ConsoleServerName is the name the proxy's serving certificate is for; every cluster secret verifies it.
	ConsoleServerName = "console." + argocd.ClusterServerDomain

	consoleCAValidity     = 10 * 365 * 24 * time.Hour
	consoleServerValidity = 365 * 24 * time.Hour
	consoleClientValidity = 90 * 24 * time.Hour
)

// consoleResult is what a reconcile observed and did about the console.
type consoleResult struct {
	// requested: spec.argoCDAgentAddon asks for the console.
	requested bool
	ok        bool
	reason    string
	message   string
	// creds issue the clusters' credentials, when ok.
	creds *consoleCreds
}

// consoleCreds are what a cluster secret's console config is made from.
type consoleCreds struct {
	ca       *pki.CA
	proxyURL string
	now      time.Time
}

// clusterConfig is the Argo CD cluster config of a cluster secret with the console on: the proxy, the CA that
// verifies the proxy, and the cluster's own client certificate, kept from current while it is fresh.
type clusterConfig struct {
	ProxyURL        string          `json:"proxyUrl"`
	TLSClientConfig tlsClientConfig `json:"tlsClientConfig"`
}

type tlsClientConfig struct {
	ServerName string `json:"serverName"`
	CAData     []byte `json:"caData"`
	CertData   []byte `json:"certData"`
	KeyData    []byte `json:"keyData"`
}

// syncConsole keeps the console CA and the proxy's serving certificate when the spec asks for the console.
func (r *Reconciler) syncConsole(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs *observation) error {
	obs.console = consoleResult{requested: gc.Spec.ConsoleEnabled()}
	if !obs.console.requested || !obs.argoNamespaceFound {
		return nil
	}
	spec := gc.Spec.ArgoCDAgentAddon
	if spec.PrincipalServerAddress == "" {
		obs.console.reason = v1alpha1.ReasonConsoleNotConfigured
		obs.console.message = "spec.argoCDAgentAddon.principalServerAddress is required: the address of argocd-pull server's console proxy"
		return nil
	}
	port := spec.PrincipalServerPort
	if port == "" {
		port = "443"
	}
	now := r.clock()
	ca, err := r.ensureConsoleCA(ctx, obs.argoNamespace, now)
	if err == nil {
		err = r.ensureConsoleTLS(ctx, obs.argoNamespace, ca, now)
	}
	if err != nil {
		obs.console.reason = v1alpha1.ReasonConsoleCertificatesFailed
		obs.console.message = err.Error()
		return nil
	}
	obs.console.ok = true
	obs.console.creds = &consoleCreds{ca: ca, proxyURL: "http://" + net.JoinHostPort(spec.PrincipalServerAddress, port), now: now}
	return nil
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// ensureConsoleCA reads the console CA of an Argo CD namespace, creating it the first time.
func (r *Reconciler) ensureConsoleCA(ctx context.Context, namespace string, now time.Time) (*pki.CA, error) {
	key := client.ObjectKey{Namespace: namespace, Name: ConsoleCASecret}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		pair, err := pki.NewCA("argocd-pull-console-ca", now, consoleCAValidity)
		if err != nil {
			return nil, err
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConsoleCASecret, Labels: map[string]string{LabelManagedBy: ManagedBy}},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM},
		}
		err = r.Client.Create(ctx, secret, client.FieldOwner(FieldOwner))
		if apierrors.IsAlreadyExists(err) {
			// Another GitOpsCluster of this namespace created it first.
			err = r.APIReader.Get(ctx, key, secret)
		}
		if err != nil {
			return nil, fmt.Errorf("create console ca secret %s: %w", key, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("get console ca secret %s: %w", key, err)
	}
	ca, err := pki.LoadCA(pki.Pair{CertPEM: secret.Data[corev1.TLSCertKey], KeyPEM: secret.Data[corev1.TLSPrivateKeyKey]})
	if err != nil {
		return nil, fmt.Errorf("console ca secret %s: %w", key, err)
	}
	return ca, nil
}

// ensureConsoleTLS keeps the proxy's serving certificate fresh, issued by ca.
func (r *Reconciler) ensureConsoleTLS(ctx context.Context, namespace string, ca *pki.CA, now time.Time) error {
	key := client.ObjectKey{Namespace: namespace, Name: ConsoleTLSSecret}
	names := []string{ConsoleServerName, "*." + argocd.ClusterServerDomain}
	current := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, current)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get console tls secret %s: %w", key, err)
	}
	found := err == nil
	if found && string(current.Data[console.SecretKeyCA]) == string(ca.CertPEM) &&
		ca.Fresh(pki.Pair{CertPEM: current.Data[console.SecretKeyCert], KeyPEM: current.Data[console.SecretKeyKey]}, ConsoleServerName, names, now) {
		return nil
	}
	pair, err := ca.Issue(ConsoleServerName, names, now, consoleServerValidity)
	if err != nil {
		return err
	}
	data := map[string][]byte{console.SecretKeyCert: pair.CertPEM, console.SecretKeyKey: pair.KeyPEM, console.SecretKeyCA: ca.CertPEM}
	if !found {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConsoleTLSSecret, Labels: map[string]string{LabelManagedBy: ManagedBy}},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if err := r.Client.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("create console tls secret %s: %w", key, err)
		}
		return nil
	}
	patch := client.MergeFromWithOptions(current.DeepCopy(), client.MergeFromWithOptimisticLock{})
	current.Data = data
	if err := r.Client.Patch(ctx, current, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("patch console tls secret %s: %w", key, err)
	}
	return nil
}

// config is a cluster's console config: current's, while its certificate is fresh and the proxy the same; else
// new, with a new client certificate.
func (c *consoleCreds) config(cluster string, current *corev1.Secret) ([]byte, error) {
	if current != nil {
		var old clusterConfig
		if json.Unmarshal(current.Data["config"], &old) == nil && old.ProxyURL == c.proxyURL &&
			old.TLSClientConfig.ServerName == ConsoleServerName && string(old.TLSClientConfig.CAData) == string(c.ca.CertPEM) &&
			c.ca.Fresh(pki.Pair{CertPEM: old.TLSClientConfig.CertData, KeyPEM: old.TLSClientConfig.KeyData}, console.ConsoleIdentityPrefix+cluster, nil, c.now) {
			return current.Data["config"], nil
		}
	}
	pair, err := c.ca.Issue(console.ConsoleIdentityPrefix+cluster, nil, c.now, consoleClientValidity)
	if err != nil {
		return nil, err
	}
	cfg := clusterConfig{ProxyURL: c.proxyURL, TLSClientConfig: tlsClientConfig{ServerName: ConsoleServerName, CAData: c.ca.CertPEM,
		CertData: pair.CertPEM, KeyData: pair.KeyPEM}}
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode console config of %s: %w", cluster, err)
	}
	return out, nil
}

// renewAt is when the earliest of the clusters' console certificates is to be issued again.
func renewAt(configs map[string][]byte) time.Time {
	var earliest time.Time
	for _, raw := range configs {
		var cfg clusterConfig
		if json.Unmarshal(raw, &cfg) != nil {
			continue
		}
		cert, err := pki.ParseCert(cfg.TLSClientConfig.CertData)
		if err != nil {
			continue
		}
		if at := pki.RenewAt(cert); earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	return earliest
}

func consoleCondition(obs *observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionConsoleReady, Status: metav1.ConditionFalse, Reason: obs.console.reason, Message: obs.console.message}
	switch {
	case !obs.argoNamespaceFound:
		c.Reason = v1alpha1.ReasonArgoNamespaceNotFound
		c.Message = fmt.Sprintf("Argo CD namespace %s not found", obs.argoNamespace)
	case obs.console.ok && len(obs.registration.failures) == 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonConsoleIssued
		c.Message = fmt.Sprintf("The hub's argocd-server reads %d clusters through the console proxy %s (CA in Secret %s/%s, proxy certificate in %s/%s)",
			obs.registration.registered, obs.console.creds.proxyURL, obs.argoNamespace, ConsoleCASecret, obs.argoNamespace, ConsoleTLSSecret)
	case obs.console.ok:
		c.Reason = v1alpha1.ReasonRegistrationFailed
		c.Message = "Some clusters' console credentials could not be written: " + summarize(obs.registration.failures)
	}
	return c
}

// consoleConfigs are the console configs of the selected clusters, keeping those of the existing secrets that
// are still good.
func consoleConfigs(creds *consoleCreds, clusters []string, existing []corev1.Secret) (map[string][]byte, error) {
	byName := map[string]*corev1.Secret{}
	for i := range existing {
		byName[existing[i].Name] = &existing[i]
	}
	configs := make(map[string][]byte, len(clusters))
	for _, cluster := range clusters {
		cfg, err := creds.config(cluster, byName[SecretName(cluster)])
		if err != nil {
			return nil, err
		}
		configs[cluster] = cfg
	}
	return configs, nil
}
