package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// credentialFiles are the files the server authenticates with and to: the bearer tokens, the serving
// certificate and the CA of client certificates. They are read at the start and again whenever one of the
// files changes, so that tokens and certificates are rotated without a restart. A file that no longer parses
// keeps the credentials it had: a half-written file must not lock every client out.
type credentialFiles struct {
	tokenFile, certFile, keyFile, caFile string

	tokens    atomic.Pointer[map[string]Identity]
	cert      atomic.Pointer[tls.Certificate]
	clientCAs atomic.Pointer[x509.CertPool]

	// contents are the files as last read; only load touches them.
	contents map[string][]byte
	// failed is the last reload error logged, so that a bad file is reported once, not at every check.
	failed string
}

func newCredentials(o *Options) *credentialFiles {
	c := &credentialFiles{tokenFile: o.TokenFile, certFile: o.TLSCertFile, keyFile: o.TLSKeyFile, caFile: o.ClientCAFile,
		contents: map[string][]byte{}}
	c.tokens.Store(&map[string]Identity{})
	return c
}

// load reads every configured file and takes up the ones that changed since the last load. It reports
// whether anything changed. On an error nothing of that file is taken up.
func (c *credentialFiles) load() (bool, error) {
	var errs []error
	changed := false
	if c.tokenFile != "" {
		ok, err := c.loadFile(c.tokenFile, func(b map[string][]byte) error {
			tokens, err := parseTokens(bytes.NewReader(b[c.tokenFile]))
			if err != nil {
				return fmt.Errorf("token file %s: %w", c.tokenFile, err)
			}
			c.tokens.Store(&tokens)
			return nil
		})
		changed, errs = changed || ok, append(errs, err)
	}
	if c.certFile != "" {
		ok, err := c.loadFile(c.certFile, func(b map[string][]byte) error {
			cert, err := tls.X509KeyPair(b[c.certFile], b[c.keyFile])
			if err != nil {
				return fmt.Errorf("serving certificate %s: %w", c.certFile, err)
			}
			c.cert.Store(&cert)
			return nil
		}, c.keyFile)
		changed, errs = changed || ok, append(errs, err)
	}
	if c.caFile != "" {
		ok, err := c.loadFile(c.caFile, func(b map[string][]byte) error {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b[c.caFile]) {
				return fmt.Errorf("client CA file %s holds no certificate", c.caFile)
			}
			c.clientCAs.Store(pool)
			return nil
		})
		changed, errs = changed || ok, append(errs, err)
	}
	return changed, errors.Join(errs...)
}

// loadFile reads path and its companions (a key with its certificate); when any of them differs from the
// last successful read, it hands their contents to take and remembers them if take succeeds.
func (c *credentialFiles) loadFile(path string, take func(map[string][]byte) error, companions ...string) (bool, error) {
	read := map[string][]byte{}
	same := true
	for _, p := range append([]string{path}, companions...) {
		b, err := os.ReadFile(p) //nolint:gosec // the operator names the credential files
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		read[p] = b
		if old, ok := c.contents[p]; !ok || !bytes.Equal(old, b) {
			same = false
		}
	}
	if same {
		return false, nil
	}
	if err := take(read); err != nil {
		return false, err
	}
	for p, b := range read {
		c.contents[p] = b
	}
	return true, nil
}

// watch reloads the files every interval until ctx ends. It logs a change once and a failure once per
// distinct error.
func (c *credentialFiles) watch(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		changed, err := c.load()
		if changed {
			logger.Info("Reloaded credentials", "tokens", len(*c.tokens.Load()))
		}
		switch {
		case err != nil && err.Error() != c.failed:
			c.failed = err.Error()
			logger.Error(err, "Failed to reload credentials; keeping the previous ones")
		case err == nil:
			c.failed = ""
		}
	}
}

// serving returns the TLS configuration of the listeners. Its certificate and client CAs are looked up at
// every handshake, so a reload takes effect for every new connection; the configuration itself never changes.
func (c *credentialFiles) serving() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cert.Load(), nil }}
	if c.caFile != "" {
		// The certificate is verified against the CAs of the moment in VerifyConnection rather than by
		// ClientCAs, which could not change; callers without one may still bring a bearer token.
		cfg.ClientAuth = tls.RequestClientCert
		cfg.VerifyConnection = c.verifyClient
	}
	return cfg
}

// verifyClient verifies a client certificate, when one is offered, against the current client CAs.
func (c *credentialFiles) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	intermediates := x509.NewCertPool()
	for _, cert := range cs.PeerCertificates[1:] {
		intermediates.AddCert(cert)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: c.clientCAs.Load(), Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return fmt.Errorf("client certificate %q: %w", cs.PeerCertificates[0].Subject.CommonName, err)
	}
	return nil
}
