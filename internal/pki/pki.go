// Package pki issues and checks the certificates of argocd-pull's console: a CA, the serving certificate of the
// server's proxy, and one client certificate per managed cluster. Pure functions over PEM; it stores nothing.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// CA is a certificate authority that issues certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// backdate covers clocks a little behind the issuer's.
const backdate = 5 * time.Minute

// NewCA creates a self-signed CA valid for validity from now.
func NewCA(commonName string, now time.Time, validity time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate ca key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Pair{}, fmt.Errorf("create ca certificate: %w", err)
	}
	return encode(der, key)
}

// LoadCA reads a CA from its certificate and key.
func LoadCA(p Pair) (*CA, error) {
	cert, err := ParseCert(p.CertPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA")
	}
	block, _ := pem.Decode(p.KeyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse ca key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the ca key cannot sign")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: p.CertPEM}, nil
}

// Issue issues a certificate for commonName: a client certificate, or a serving certificate for dnsNames when
// there are some.
func (ca *CA) Issue(commonName string, dnsNames []string, now time.Time, validity time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return Pair{}, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(dnsNames) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = dnsNames
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, fmt.Errorf("issue certificate for %s: %w", commonName, err)
	}
	return encode(der, key)
}

// ParseCert parses the first certificate of a PEM block.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return cert, nil
}

// Fresh reports whether a certificate was issued by ca for commonName (and dnsNames), is valid at now and has
// more than a third of its lifetime left: a certificate that is not fresh is issued again.
func (ca *CA) Fresh(p Pair, commonName string, dnsNames []string, now time.Time) bool {
	cert, err := ParseCert(p.CertPEM)
	if err != nil || cert.Subject.CommonName != commonName || !slices.Equal(cert.DNSNames, dnsNames) {
		return false
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return false
	}
	if _, err := tlsKeyMatches(p); err != nil {
		return false
	}
	return now.Before(RenewAt(cert))
}

// RenewAt is when a certificate should be issued again: when a third of its lifetime is left.
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Add(-life / 3)
}

func tlsKeyMatches(p Pair) (bool, error) {
	cert, err := ParseCert(p.CertPEM)
	if err != nil {
		return false, err
	}
	block, _ := pem.Decode(p.KeyPEM)
	if block == nil {
		return false, errors.New("no PEM key")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return false, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return false, errors.New("the key cannot sign")
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return false, errors.New("the key does not match the certificate")
	}
	return true, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encode key: %w", err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return serial, nil
}
