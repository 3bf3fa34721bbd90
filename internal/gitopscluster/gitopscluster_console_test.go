package gitopscluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/pki"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// TestConsoleCredentials: spec.argoCDAgentAddon gives every cluster secret the console proxy and a client
// certificate of that cluster only, issued by a console CA that also issued the proxy's serving certificate;
// the credentials stay the same from one reconcile to the next; a cluster whose certificate is about to expire
// gets a new one; turning the addon off takes the credentials away.
func TestConsoleCredentials(t *testing.T) {
	s := startSuite(t)
	ns := "console-argocd"
	s.namespace(t, ns)
	s.placement(t, ns, "all")
	s.decide(t, ns, "all", 1, "con-c1", "con-c2")
	gc := &v1alpha1.GitOpsCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gc"},
		Spec: v1alpha1.GitOpsClusterSpec{
			PlacementRef:     &corev1.ObjectReference{Kind: "Placement", APIVersion: "cluster.open-cluster-management.io/v1beta1", Name: "all"},
			ArgoCDAgentAddon: &v1alpha1.ArgoCDAgentAddonSpec{},
		},
	}
	s.create(t, gc)
	key := client.ObjectKeyFromObject(gc)
	// Without the principal's address the console cannot be set up, and the GitOpsCluster says so.
	s.waitCondition(t, key, v1alpha1.ConditionConsoleReady, metav1.ConditionFalse, v1alpha1.ReasonConsoleNotConfigured)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConsoleNotConfigured)

	s.update(t, gc, func() {
		gc.Spec.ArgoCDAgentAddon = &v1alpha1.ArgoCDAgentAddonSpec{PrincipalServerAddress: "127.0.0.1", PrincipalServerPort: "9443"}
	})
	s.waitCondition(t, key, v1alpha1.ConditionConsoleReady, metav1.ConditionTrue, v1alpha1.ReasonConsoleIssued)
	s.waitCondition(t, key, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConsoleCASecret}}
	s.get(t, caSecret)
	ca, err := pki.LoadCA(pki.Pair{CertPEM: caSecret.Data[corev1.TLSCertKey], KeyPEM: caSecret.Data[corev1.TLSPrivateKeyKey]})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tlsSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConsoleTLSSecret}}
	s.get(t, tlsSecret)
	if _, err := console.TunnelTLS(tlsSecret.Data[console.SecretKeyCert], tlsSecret.Data[console.SecretKeyKey], tlsSecret.Data[console.SecretKeyCA]); err != nil {
		t.Fatalf("the proxy's TLS secret does not load: %v", err)
	}
	serving, err := pki.ParseCert(tlsSecret.Data[console.SecretKeyCert])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: ConsoleServerName}); err != nil {
		t.Errorf("the proxy's certificate does not verify as %s: %v", ConsoleServerName, err)
	}

	configs := map[string]clusterConfig{}
	testutil.Eventually(t, "both cluster secrets with console credentials", func() error {
		_, secrets := s.clusterSecrets(t, ns)
		for _, c := range []string{"con-c1", "con-c2"} {
			var cfg clusterConfig
			if err := json.Unmarshal(secrets[c].Data["config"], &cfg); err != nil {
				return fmt.Errorf("%s config: %w", c, err)
			}
			configs[c] = cfg
		}
		return nil
	})
	for c, cfg := range configs {
		if cfg.ProxyURL != "http://127.0.0.1:9443" || cfg.TLSClientConfig.ServerName != ConsoleServerName || string(cfg.TLSClientConfig.CAData) != string(ca.CertPEM) {
			t.Errorf("%s config: proxy %q, server name %q", c, cfg.ProxyURL, cfg.TLSClientConfig.ServerName)
		}
		if _, err := tls.X509KeyPair(cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData); err != nil {
			t.Errorf("%s: client certificate and key: %v", c, err)
		}
		cert, err := pki.ParseCert(cfg.TLSClientConfig.CertData)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != console.ConsoleIdentityPrefix+c {
			t.Errorf("%s: client certificate is for %q", c, cert.Subject.CommonName)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: client certificate does not verify against the console CA: %v", c, err)
		}
	}

	// Another reconcile (a new decision) keeps the credentials.
	s.decide(t, ns, "all", 1, "con-c1", "con-c2", "con-c3")
	s.waitClusters(t, ns, ns+"/gc", "con-c1", "con-c2", "con-c3")
	testutil.Eventually(t, "con-c3 with console credentials", func() error {
		_, secrets := s.clusterSecrets(t, ns)
		if len(secrets["con-c3"].Data["config"]) == 0 {
			return fmt.Errorf("no config")
		}
		return nil
	})
	_, secrets := s.clusterSecrets(t, ns)
	var again clusterConfig
	if err := json.Unmarshal(secrets["con-c1"].Data["config"], &again); err != nil {
		t.Fatal(err)
	}
	if string(again.TLSClientConfig.CertData) != string(configs["con-c1"].TLSClientConfig.CertData) {
		t.Error("a reconcile issued con-c1 a new certificate while the old one was fresh")
	}

	// A certificate that reached its renewal time is issued again.
	old, err := ca.Issue(console.ConsoleIdentityPrefix+"con-c2", nil, time.Now().Add(-80*24*time.Hour), consoleClientValidity)
	if err != nil {
		t.Fatal(err)
	}
	stale := configs["con-c2"]
	stale.TLSClientConfig.CertData, stale.TLSClientConfig.KeyData = old.CertPEM, old.KeyPEM
	staleJSON, err := json.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	sec := secrets["con-c2"]
	s.update(t, &sec, func() { sec.Data["config"] = staleJSON })
	testutil.Eventually(t, "con-c2's expiring certificate issued again", func() error {
		_, secrets := s.clusterSecrets(t, ns)
		var cfg clusterConfig
		if err := json.Unmarshal(secrets["con-c2"].Data["config"], &cfg); err != nil {
			return err
		}
		cert, err := pki.ParseCert(cfg.TLSClientConfig.CertData)
		if err != nil {
			return err
		}
		if time.Until(cert.NotAfter) < 60*24*time.Hour {
			return fmt.Errorf("certificate expires %s", cert.NotAfter)
		}
		return nil
	})

	// Off: the secrets lose their credentials, the condition goes.
	s.update(t, gc, func() { gc.Spec.ArgoCDAgentAddon.Uninstall = true })
	testutil.Eventually(t, "console credentials removed", func() error {
		_, secrets := s.clusterSecrets(t, ns)
		for c, sec := range secrets {
			if _, ok := sec.Data["config"]; ok {
				return fmt.Errorf("%s still has a config", c)
			}
		}
		s.get(t, gc)
		for _, c := range gc.Status.Conditions {
			if c.Type == v1alpha1.ConditionConsoleReady {
				return fmt.Errorf("ConsoleReady still in the status")
			}
		}
		return nil
	})
}
