package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/testutil"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
)

// testPKI is a CA with a serving certificate for 127.0.0.1 and client certificates by common name.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca, caKey: key, caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	writePEM(t, filepath.Join(p.dir, "ca.crt"), "CERTIFICATE", der)
	return p
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate and key for the common name and returns their paths.
func (p *testPKI) issue(t *testing.T, cn string, server bool) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(p.dir, cn+".crt"), filepath.Join(p.dir, cn+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", keyDER)
	return certPath, keyPath
}

// securedServer serves TLS with client certificates and tokens, anonymous callers refused.
func securedServer(t *testing.T) (*Server, *testPKI) {
	t.Helper()
	return securedServerWith(t, func(*Options) {})
}

func securedServerWith(t *testing.T, configure func(*Options)) (*Server, *testPKI) {
	t.Helper()
	pki := newTestPKI(t)
	o := testOptions(testDB(t), "secure")
	o.AllowAnonymous = false
	o.TLSCertFile, o.TLSKeyFile = pki.issue(t, "server", true)
	o.ClientCAFile = filepath.Join(pki.dir, "ca.crt")
	o.TokenFile = filepath.Join(pki.dir, "tokens")
	tokens := "# test tokens\nagent1-token,agent,cluster1\nhub-token,source,hub\nhub2-token,source,hub2\nadmin-token,admin\nagent9-token,agent,cluster9\n"
	if err := os.WriteFile(o.TokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	configure(o)
	s := startServer(t, o)
	createConsumer(t, s, "cluster1", "cluster2")
	return s, pki
}

// rawClient is a plain gRPC client of an endpoint, with a bearer token or a client certificate.
func rawClient(t *testing.T, addr string, pki *testPKI, token string, cert *tls.Certificate) pbv1.CloudEventServiceClient {
	t.Helper()
	var opt []grpc.DialOption
	if token != "" {
		opt = append(opt, grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}))
	}
	return dialRaw(t, addr, pki, cert, opt...)
}

// authorizationHeader sends an Authorization header as it is, whatever its scheme.
type authorizationHeader string

func (h authorizationHeader) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(h)}, nil
}

func (authorizationHeader) RequireTransportSecurity() bool { return true }

func dialRaw(t *testing.T, addr string, pki *testPKI, cert *tls.Certificate, extra ...grpc.DialOption) pbv1.CloudEventServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, extra...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pbv1.NewCloudEventServiceClient(conn)
}

func publish(t *testing.T, c pbv1.CloudEventServiceClient, evt *cloudevents.Event) error {
	t.Helper()
	pb, err := toProto(context.Background(), evt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(context.Background(), &pbv1.PublishRequest{Event: pb})
	return err
}

// subscribeErr opens a subscription and returns how it ends within a second (nil when it stays open). The
// client ends a subscription that stays open by cancelling it: a deadline would reach the server too, which
// may then end the stream first with an OK status.
func subscribeErr(t *testing.T, c pbv1.CloudEventServiceClient, req *pbv1.SubscriptionRequest) error {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// The second a subscription is given to stay open counts from when it was sent: the connection's TLS
	// handshake, before, can take longer than that on a loaded machine.
	connecting := time.AfterFunc(30*time.Second, func() { cancel(errors.New("not connected in 30 s")) })
	stream, err := c.Subscribe(ctx, req)
	connecting.Stop()
	if err != nil {
		return err
	}
	stayedOpen := errors.New("the subscription stayed open")
	timer := time.AfterFunc(time.Second, func() { cancel(stayedOpen) })
	defer timer.Stop()
	if _, err := stream.Header(); err != nil {
		return err
	}
	_, err = stream.Recv()
	if status.Code(err) == codes.Canceled && errors.Is(context.Cause(ctx), stayedOpen) {
		return nil
	}
	return err
}

func specEvt(source, cluster, id string, version int64, action types.EventAction) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceSpec, Action: action}
	evt := types.NewEventBuilder(source, et).WithResourceID(id).WithResourceVersion(version).WithClusterName(cluster).NewEvent()
	evt.SetExtension(types.ExtensionWorkMeta, `{"name":"w-`+id+`","namespace":"`+cluster+`"}`)
	_ = evt.SetData(cloudevents.ApplicationJSON, map[string]any{"manifests": manifests("cm-" + id)})
	return &evt
}

// withManifest replaces an event's manifests with one ConfigMap of the given name.
func withManifest(evt *cloudevents.Event, name string) *cloudevents.Event {
	_ = evt.SetData(cloudevents.ApplicationJSON, map[string]any{"manifests": manifests(name)})
	return evt
}

// statusTransition is the conditions' transition time in statusEvt: fixed, so that the same status sent twice
// hashes the same even when a second turns between the two.
var statusTransition = metav1.NewTime(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))

func statusEvt(cluster, id string, version int64, seq string) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceStatus, Action: types.UpdateRequestAction}
	evt := types.NewEventBuilder(cluster+"-agent", et).WithResourceID(id).WithResourceVersion(version).
		WithClusterName(cluster).WithStatusUpdateSequenceID(seq).WithOriginalSource("hub").NewEvent()
	_ = evt.SetData(cloudevents.ApplicationJSON, map[string]any{"conditions": []metav1.Condition{{Type: "Applied",
		Status: metav1.ConditionTrue, Reason: "Applied", Message: seq, LastTransitionTime: statusTransition}}})
	return &evt
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: got %v, want code %s", what, err, code)
	}
}

func TestAuthenticationAndAuthorization(t *testing.T) {
	s, pki := securedServer(t)
	src, agt := s.SourceAddr(), s.AgentAddr()
	hub := rawClient(t, src, pki, "hub-token", nil)
	hub2 := rawClient(t, src, pki, "hub2-token", nil)
	agent1 := rawClient(t, agt, pki, "agent1-token", nil)
	sub := func(source, cluster string) *pbv1.SubscriptionRequest {
		return &pbv1.SubscriptionRequest{Source: source, ClusterName: cluster, DataType: dataType.String()}
	}

	// Authentication.
	wantCode(t, "no credentials", publish(t, rawClient(t, src, pki, "", nil), specEvt("hub", "cluster1", "r1", 1, types.CreateRequestAction)), codes.Unauthenticated)
	wantCode(t, "unknown token", publish(t, rawClient(t, src, pki, "nope", nil), specEvt("hub", "cluster1", "r1", 1, types.CreateRequestAction)), codes.Unauthenticated)

	// Sources only for their own source ID.
	wantCode(t, "create as hub", publish(t, hub, specEvt("hub", "cluster1", "r1", 1, types.CreateRequestAction)), codes.OK)
	wantCode(t, "create for cluster2", publish(t, hub, specEvt("hub", "cluster2", "r2", 1, types.CreateRequestAction)), codes.OK)
	wantCode(t, "publish as another source", publish(t, hub, specEvt("hub2", "cluster1", "r3", 1, types.CreateRequestAction)), codes.PermissionDenied)
	wantCode(t, "update another source's resource", publish(t, hub2, specEvt("hub2", "cluster1", "r1", 2, types.UpdateRequestAction)), codes.PermissionDenied)
	wantCode(t, "subscribe as another source", subscribeErr(t, hub, sub("hub2", "")), codes.PermissionDenied)
	wantCode(t, "subscribe as itself", subscribeErr(t, hub, sub("hub", "")), codes.OK)
	wantCode(t, "agent token on the source endpoint", subscribeErr(t, rawClient(t, src, pki, "agent1-token", nil), sub("hub", "")), codes.PermissionDenied)

	// Agents only for their own consumer.
	wantCode(t, "subscribe as cluster1", subscribeErr(t, agent1, sub("", "cluster1")), codes.OK)
	wantCode(t, "subscribe as cluster2", subscribeErr(t, agent1, sub("", "cluster2")), codes.PermissionDenied)
	wantCode(t, "status for cluster2", publish(t, agent1, statusEvt("cluster2", "r2", 1, "1000")), codes.PermissionDenied)
	wantCode(t, "status of cluster2's resource claimed as cluster1", publish(t, agent1, statusEvt("cluster1", "r2", 1, "1001")), codes.PermissionDenied)
	wantCode(t, "unknown consumer", subscribeErr(t, rawClient(t, agt, pki, "agent9-token", nil), sub("", "cluster9")), codes.NotFound)
	wantCode(t, "spec for an unknown consumer", publish(t, hub, specEvt("hub", "cluster9", "r9", 1, types.CreateRequestAction)), codes.NotFound)

	// Stale versions.
	wantCode(t, "update to version 5", publish(t, hub, withManifest(specEvt("hub", "cluster1", "r1", 5, types.UpdateRequestAction), "v5")), codes.OK)
	wantCode(t, "change at an older version", publish(t, hub, withManifest(specEvt("hub", "cluster1", "r1", 4, types.UpdateRequestAction), "v4")), codes.FailedPrecondition)
	wantCode(t, "status of the old version", publish(t, agent1, statusEvt("cluster1", "r1", 1, "1002")), codes.FailedPrecondition)
	wantCode(t, "status of the current version", publish(t, agent1, statusEvt("cluster1", "r1", 5, "1003")), codes.OK)
	wantCode(t, "the same status again", publish(t, agent1, statusEvt("cluster1", "r1", 5, "1003")), codes.OK)
	wantCode(t, "an older sequence", publish(t, agent1, statusEvt("cluster1", "r1", 5, "1001")), codes.FailedPrecondition)

	// Client certificates name the identity.
	certPath, keyPath := pki.issue(t, "agent:cluster1", false)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	byCert := rawClient(t, agt, pki, "", &cert)
	wantCode(t, "mTLS subscribe as cluster1", subscribeErr(t, byCert, sub("", "cluster1")), codes.OK)
	wantCode(t, "mTLS subscribe as cluster2", subscribeErr(t, byCert, sub("", "cluster2")), codes.PermissionDenied)
}

// TestOneRolePerCredential: a credential is an agent of one cluster, a source, or the REST admin, and is
// refused in every other role, on either endpoint.
func TestOneRolePerCredential(t *testing.T) {
	s, pki := securedServer(t)
	src, agt := s.SourceAddr(), s.AgentAddr()
	sub := func(source, cluster string) *pbv1.SubscriptionRequest {
		return &pbv1.SubscriptionRequest{Source: source, ClusterName: cluster, DataType: dataType.String()}
	}
	certOf := func(cn string) *tls.Certificate {
		certPath, keyPath := pki.issue(t, cn, false)
		cert, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			t.Fatal(err)
		}
		return &cert
	}
	admin := func(addr string) pbv1.CloudEventServiceClient { return rawClient(t, addr, pki, "admin-token", nil) }
	adminCert := func(addr string) pbv1.CloudEventServiceClient { return rawClient(t, addr, pki, "", certOf("admin")) }

	wantCode(t, "admin token subscribes as cluster1's agent", subscribeErr(t, admin(agt), sub("", "cluster1")), codes.PermissionDenied)
	wantCode(t, "admin token publishes a status for cluster1", publish(t, admin(agt), statusEvt("cluster1", "r1", 1, "1")), codes.PermissionDenied)
	wantCode(t, "admin token subscribes as the source", subscribeErr(t, admin(src), sub("hub", "")), codes.PermissionDenied)
	wantCode(t, "admin token publishes a spec as the source", publish(t, admin(src), specEvt("hub", "cluster1", "a1", 1, types.CreateRequestAction)), codes.PermissionDenied)
	wantCode(t, "admin certificate subscribes as cluster1's agent", subscribeErr(t, adminCert(agt), sub("", "cluster1")), codes.PermissionDenied)
	wantCode(t, "admin certificate publishes a spec as the source", publish(t, adminCert(src), specEvt("hub", "cluster1", "a2", 1, types.CreateRequestAction)), codes.PermissionDenied)
	wantCode(t, "source token on the agent endpoint", subscribeErr(t, rawClient(t, agt, pki, "hub-token", nil), sub("", "cluster1")), codes.PermissionDenied)
	wantCode(t, "source certificate on the agent endpoint", subscribeErr(t, rawClient(t, agt, pki, "", certOf("source:hub")), sub("", "cluster1")), codes.PermissionDenied)
	wantCode(t, "agent certificate on the source endpoint", publish(t, rawClient(t, src, pki, "", certOf("agent:cluster1")), specEvt("hub", "cluster1", "a3", 1, types.CreateRequestAction)), codes.PermissionDenied)
	wantCode(t, "agent token on the source endpoint", publish(t, rawClient(t, src, pki, "agent1-token", nil), specEvt("hub", "cluster1", "a4", 1, types.CreateRequestAction)), codes.PermissionDenied)
	// Each in its own role.
	wantCode(t, "source certificate as the source", publish(t, rawClient(t, src, pki, "", certOf("source:hub")), specEvt("hub", "cluster1", "a5", 1, types.CreateRequestAction)), codes.OK)
	wantCode(t, "agent certificate as its cluster", subscribeErr(t, rawClient(t, agt, pki, "", certOf("agent:cluster1")), sub("", "cluster1")), codes.OK)

	// RFC 7235: the scheme of the Authorization header is case-insensitive.
	for _, header := range []string{"bearer hub-token", "BEARER hub-token", "Bearer  hub-token"} {
		c := dialRaw(t, src, pki, nil, grpc.WithPerRPCCredentials(authorizationHeader(header)))
		wantCode(t, "scheme of "+header, subscribeErr(t, c, sub("hub", "")), codes.OK)
	}
	for _, header := range []string{"Basic aHViOnRva2Vu", "hub-token", "Bearerhub-token"} {
		c := dialRaw(t, src, pki, nil, grpc.WithPerRPCCredentials(authorizationHeader(header)))
		wantCode(t, "scheme of "+header, subscribeErr(t, c, sub("hub", "")), codes.Unauthenticated)
	}

	// A certificate of another CA is refused at the handshake.
	other := newTestPKI(t)
	certPath, keyPath := other.issue(t, "agent:cluster1", false)
	foreign, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "certificate of another CA", subscribeErr(t, rawClient(t, agt, pki, "", &foreign), sub("", "cluster1")), codes.Unavailable)
}

// TestCredentialRotation: tokens, the serving certificate and the client CA are reloaded from their files while
// the server runs; a file that does not parse leaves the last good credentials in place.
func TestCredentialRotation(t *testing.T) {
	s, pki := securedServerWith(t, func(o *Options) { o.CredentialsReloadInterval = 100 * time.Millisecond })
	src, agt := s.SourceAddr(), s.AgentAddr()
	subscribeAsHub := func(token string) error {
		return subscribeErr(t, rawClient(t, src, pki, token, nil), &pbv1.SubscriptionRequest{Source: "hub", DataType: dataType.String()})
	}
	write := func(path, content string) {
		t.Helper()
		// Written aside and renamed, as Kubernetes swaps a mounted Secret: never a half-written file.
		if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}

	// Tokens.
	wantCode(t, "the first token", subscribeAsHub("hub-token"), codes.OK)
	write(s.opts.TokenFile, "hub-token-2,source,hub\nadmin-token,admin\n")
	testutil.Eventually(t, "the rotated token is accepted", func() error { return subscribeAsHub("hub-token-2") })
	wantCode(t, "the retired token", subscribeAsHub("hub-token"), codes.Unauthenticated)
	write(s.opts.TokenFile, "hub-token-3,source\n")
	testutil.Consistently(t, "the last good tokens stay in force after a bad file", 2*time.Second, func() error {
		if err := subscribeAsHub("hub-token-3"); status.Code(err) != codes.Unauthenticated {
			return fmt.Errorf("the token of the bad file: got %v, want Unauthenticated", err)
		}
		return subscribeAsHub("hub-token-2")
	})

	// The serving certificate.
	serial := func() *big.Int {
		conn, err := tls.Dial("tcp", s.HTTPAddr(), &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	before := serial()
	certPath, keyPath := pki.issue(t, "server-2", true)
	for from, to := range map[string]string{certPath: s.opts.TLSCertFile, keyPath: s.opts.TLSKeyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		write(to, string(b))
	}
	testutil.EventuallyTrue(t, 10*time.Second, "the new serving certificate", func() bool { return serial().Cmp(before) != 0 })

	// The client CA: a certificate of a new CA is refused until the bundle holds that CA.
	next := newTestPKI(t)
	certPath, keyPath = next.issue(t, "agent:cluster1", false)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	sub := &pbv1.SubscriptionRequest{ClusterName: "cluster1", DataType: dataType.String()}
	wantCode(t, "certificate of the next CA before the bundle has it", subscribeErr(t, rawClient(t, agt, pki, "", &cert), sub), codes.Unavailable)
	bundle := ""
	for _, dir := range []string{pki.dir, next.dir} {
		b, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		bundle += string(b)
	}
	write(s.opts.ClientCAFile, bundle)
	testutil.Eventually(t, "the certificate of the next CA is accepted", func() error {
		return subscribeErr(t, rawClient(t, agt, pki, "", &cert), sub)
	})
}

// TestUnmodifiedClientsOverTLS runs the sdk-go clients with a token (source) and a client certificate
// (agent) against the secured server.
func TestUnmodifiedClientsOverTLS(t *testing.T) {
	s, pki := securedServer(t)
	sourceCfg := grpcOptions(s.SourceAddr())
	sourceCfg.Dialer.TLSConfig = &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12}
	sourceCfg.Dialer.Token = "hub-token"
	certPath, keyPath := pki.issue(t, "system:open-cluster-management:cluster1:agent", false)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	agentCfg := grpcOptions(s.AgentAddr())
	agentCfg.Dialer.TLSConfig = &tls.Config{RootCAs: pki.caPool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	startAgent(t, agentCfg, "cluster1")
	source := startSource(t, sourceCfg, "hub")
	applied(t, source, "cluster1", "secure-app")
}

func TestRESTAuthorization(t *testing.T) {
	s, pki := securedServer(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12}}}
	get := func(token, query string) int {
		req, err := http.NewRequest(http.MethodGet, "https://"+s.HTTPAddr()+restapi.BasePath+"/resource-bundles?search="+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(token, " "): // a whole header
			req.Header.Set("Authorization", token)
		case token != "":
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		token, query string
		want         int
	}{
		{"", "", http.StatusUnauthorized},
		{"hub-token", "source+%3D+%27hub%27", http.StatusOK},
		{"hub-token", "source+%3D+%27hub2%27", http.StatusForbidden},
		{"hub-token", "", http.StatusForbidden},
		{"agent1-token", "source+%3D+%27hub%27", http.StatusForbidden},
		{"admin-token", "", http.StatusOK},
		{"bearer admin-token", "", http.StatusOK},
		{"BEARER admin-token", "", http.StatusOK},
		{"Basic YWRtaW46YWRtaW4=", "", http.StatusUnauthorized},
		{"agent1-token", "", http.StatusForbidden},
	} {
		if got := get(c.token, c.query); got != c.want {
			t.Errorf("token %q search %q: got %d, want %d", c.token, c.query, got, c.want)
		}
	}
}
