package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Keys of the console's TLS Secret, as a kubernetes.io/tls Secret has them, with the CA beside.
const (
	SecretKeyCert = "tls.crt"
	SecretKeyKey  = "tls.key"
	SecretKeyCA   = "ca.crt"
)

// SecretTLS reads the TLS of the KubeProxy's tunnels from a Secret on the hub, which the GitOpsCluster controller
// keeps: tls.crt and tls.key, the proxy's serving certificate, and ca.crt, the console CA that issued the
// managed clusters' client certificates (and only those: the server's other client CAs are not trusted here).
// It reads the Secret again when what it holds is older than Refresh, so a rotation needs no restart; a Secret
// that does not parse keeps the last good configuration.
type SecretTLS struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Refresh   time.Duration

	mu      sync.Mutex
	cfg     *tls.Config
	version string
	read    time.Time
	failed  string
}

// Config returns the tunnels' TLS configuration.
func (s *SecretTLS) Config() (*tls.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg != nil && time.Since(s.read) < s.Refresh {
		return s.cfg, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err == nil && secret.ResourceVersion == s.version && s.cfg != nil {
		s.read = time.Now()
		return s.cfg, nil
	}
	var cfg *tls.Config
	if err == nil {
		cfg, err = TunnelTLS(secret.Data[SecretKeyCert], secret.Data[SecretKeyKey], secret.Data[SecretKeyCA])
	}
	if err != nil {
		err = fmt.Errorf("console TLS secret %s/%s: %w", s.Namespace, s.Name, err)
		if err.Error() != s.failed {
			s.failed = err.Error()
			klog.Background().Info("Cannot read the console's TLS; keeping what was read before", "err", err, "before", s.cfg != nil)
		}
		if s.cfg != nil {
			return s.cfg, nil
		}
		return nil, err
	}
	s.cfg, s.version, s.read, s.failed = cfg, secret.ResourceVersion, time.Now(), ""
	return cfg, nil
}

// TunnelTLS is the TLS configuration of a tunnel: the serving certificate and key, and the CA that verifies the
// clusters' client certificates. It offers HTTP/1.1 only (the tunnel serves one HTTP/1.1 connection).
func TunnelTLS(certPEM, keyPEM, caPEM []byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the console CA holds no certificate")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}
