package console_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metadataclient "k8s.io/client-go/metadata"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workclientset "open-cluster-management.io/api/client/work/clientset/versioned"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/consoleagent"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/pki"
	"github.com/argocd-pull/argocd-pull/internal/resp"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) {
	os.Exit(testutil.Main(m, loopback.Options{ManagedClusters: []string{"c1"}}, &env))
}

// fixture is a hub console (redis proxy and kube proxy on a Hub) and one managed cluster's console agent, each
// with a real redis, the managed cluster a real kube-apiserver.
type fixture struct {
	hubRedis, spokeRedis *resp.Client
	redisProxy           string
	kubeProxy            string
	ca                   *pki.CA
	spokeUIDs            map[string]string
	hub                  *console.Hub
}

func startFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{spokeUIDs: map[string]string{}}
	hubRedis, hubRedisAddr := startRedis(t, "redis-hub")
	spokeRedis, spokeRedisAddr := startRedis(t, "redis-c1")
	f.hubRedis, f.spokeRedis = hubRedis, spokeRedis

	// The managed cluster: resources of a delivered Application, a resource of none, the work agent's record.
	spoke := env.Cluster("c1")
	kube := kubernetes.NewForConfigOrDie(spoke.Config())
	mustDo(t, ensureNamespace(ctx, kube, "gb"))
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gb", Name: "cm"}, Data: map[string]string{"color": "blue"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gb", Name: "creds"}, Data: map[string][]byte{"password": []byte("hunter2")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gb", Name: "other"}, Data: map[string]string{"private": "yes"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gb", Name: "other-creds"}, Data: map[string][]byte{"token": []byte("t0k3n")}},
	} {
		var uid string
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			created, err := kube.CoreV1().ConfigMaps("gb").Create(ctx, o, metav1.CreateOptions{})
			mustDo(t, err)
			uid = string(created.UID)
		case *corev1.Secret:
			created, err := kube.CoreV1().Secrets("gb").Create(ctx, o, metav1.CreateOptions{})
			mustDo(t, err)
			uid = string(created.UID)
		}
		f.spokeUIDs[obj.GetName()] = uid
	}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "gb", Name: "cm.1"}, Reason: "Tested", Message: "an event of cm",
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "gb", Name: "cm", UID: types.UID(f.spokeUIDs["cm"])}}
	_, err := kube.CoreV1().Events("gb").Create(ctx, event, metav1.CreateOptions{})
	mustDo(t, err)
	works := workclientset.NewForConfigOrDie(spoke.Config())
	amw := &workv1.AppliedManifestWork{ObjectMeta: metav1.ObjectMeta{Name: "hubhash-app1"},
		Spec: workv1.AppliedManifestWorkSpec{HubHash: "hubhash", AgentID: "c1-agent", ManifestWorkName: "app1"}}
	created, err := works.WorkV1().AppliedManifestWorks().Create(ctx, amw, metav1.CreateOptions{})
	mustDo(t, err)
	created.Status.AppliedResources = []workv1.AppliedManifestResourceMeta{{Version: "v1alpha1",
		ResourceIdentifier: workv1.ResourceIdentifier{Group: argocd.Group, Resource: "applications", Namespace: "argocd", Name: "app1"}}}
	_, err = works.WorkV1().AppliedManifestWorks().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	mustDo(t, err)

	// The cluster's Argo CD cache: the tree of app1 holds cm and creds.
	tree := fmt.Sprintf(`{"nodes":[{"version":"v1","kind":"ConfigMap","namespace":"gb","name":"cm","uid":%q},`+
		`{"version":"v1","kind":"Secret","namespace":"gb","name":"creds","uid":%q}]}`, f.spokeUIDs["cm"], f.spokeUIDs["creds"])
	setGz(t, spokeRedis, "app|resources-tree|app1|1.8.3.gz", tree)
	managed := `[{"kind":"Secret","namespace":"gb","name":"creds","liveState":"{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"data\":{\"password\":\"aHVudGVyMg==\"}}"}]`
	setGz(t, spokeRedis, "app|managed-resources|app1|1.8.3.gz", managed)
	setGz(t, spokeRedis, "app|resources-tree|app2|1.8.3.gz", `{"nodes":[]}`)
	setGz(t, spokeRedis, "cluster|info|https://kubernetes.default.svc|1.8.3.gz", `{"serverVersion":"1.33"}`)
	setGz(t, hubRedis, "app|resources-tree|local|1.8.3.gz", `{"nodes":[{"kind":"ConfigMap","name":"hub-own"}]}`)

	// The hub: app1 and app2 pulled to c1 (only app1 delivered), app3 pulled to c2 (no agent), local run by the
	// hub's Argo CD.
	hub := env.Hub
	hubApps := map[string]map[string]string{"app1": {argocd.AnnotationManagedCluster: "c1"}, "app2": {argocd.AnnotationManagedCluster: "c1"},
		"app3": {argocd.AnnotationManagedCluster: "c2"}, "local": nil}
	hc, err := client.New(hub.Config(), client.Options{})
	mustDo(t, err)
	mustDo(t, hc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}))
	for name, ann := range hubApps {
		app := argocd.NewApplication()
		app.SetNamespace("argocd")
		app.SetName(name)
		if ann != nil {
			app.SetLabels(map[string]string{argocd.LabelPull: "true"})
			app.SetAnnotations(ann)
		}
		app.Object["spec"] = map[string]any{"project": "default", "destination": map[string]any{"server": "https://kubernetes.default.svc"},
			"source": map[string]any{"repoURL": "https://example.com/x.git"}}
		mustDo(t, hc.Create(ctx, app))
	}

	// The hub console and the agent, on a gRPC server of their own (argocd-pull server's agent endpoint in
	// production, where the agent's credential names its cluster).
	f.hub = console.NewHub(5 * time.Second)
	grpcServer := grpc.NewServer()
	consoleapi.Register(grpcServer, func(stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		return f.hub.Serve(stream, md.Get(consoleapi.ClusterHeader)[0])
	})
	grpcListener, err := net.Listen("tcp", "127.0.0.1:0")
	mustDo(t, err)
	go func() { _ = grpcServer.Serve(grpcListener) }()
	t.Cleanup(grpcServer.Stop)
	grpcConfig := filepath.Join(t.TempDir(), "grpc.yaml")
	mustDo(t, os.WriteFile(grpcConfig, []byte("url: "+grpcListener.Addr().String()+"\n"), 0o600))
	agent, err := consoleagent.New(consoleagent.Config{Cluster: "c1", AgentID: "c1-agent", GRPCConfig: grpcConfig, Kube: spoke.Config(),
		Redis: spokeRedisAddr, ArgoCDNamespace: "argocd"})
	mustDo(t, err)
	go func() { _ = agent.Run(ctx) }()
	testutil.Eventually(t, "the agent's console stream", func() error {
		if !f.hub.Connected(context.Background(), "c1") {
			return fmt.Errorf("not connected")
		}
		return nil
	})

	meta := metadataclient.NewForConfigOrDie(hub.Config())
	c := &console.Console{Hub: f.hub, Targets: console.NewHubTargets(meta, 100, time.Minute), ArgoCDNamespace: "argocd", HoldFor: time.Second}
	f.redisProxy = serve(t, ctx, (&console.RedisProxy{Console: c, Upstream: hubRedisAddr}).Serve)

	caPair, err := pki.NewCA("test-console-ca", time.Now(), time.Hour)
	mustDo(t, err)
	f.ca, err = pki.LoadCA(caPair)
	mustDo(t, err)
	serving, err := f.ca.Issue("console.ocm-pull.invalid", []string{"console.ocm-pull.invalid"}, time.Now(), time.Hour)
	mustDo(t, err)
	tunnel, err := console.TunnelTLS(serving.CertPEM, serving.KeyPEM, caPair.CertPEM)
	mustDo(t, err)
	f.kubeProxy = serve(t, ctx, (&console.KubeProxy{Hub: f.hub, TLS: func() (*tls.Config, error) { return tunnel, nil }}).Serve)
	return f
}

// TestConsole runs the console's doors against one fixture.
func TestConsole(t *testing.T) {
	f := startFixture(t)
	t.Run("RedisProxy", func(t *testing.T) { testRedisProxy(t, f) })
	t.Run("RedisProxySubscription", func(t *testing.T) { testRedisProxySubscription(t, f) })
	t.Run("KubeProxy", func(t *testing.T) { testKubeProxy(t, f) })
}

// testRedisProxy: argocd-server's reads of a pulled Application's cache entries are answered by its cluster
// (compressed or not, Secret data replaced), everything else by the hub's redis; an Application the cluster's
// agent did not deliver and a cluster without an agent are clear errors.
func testRedisProxy(t *testing.T, f *fixture) {
	ctx := context.Background()
	proxy := &resp.Client{Addr: f.redisProxy}
	defer proxy.Close()

	gz, found, err := proxy.Get(ctx, "app|resources-tree|app1|1.8.3.gz")
	if err != nil || !found {
		t.Fatalf("tree of app1: %v, found %v", err, found)
	}
	if tree := gunzip(t, gz); !strings.Contains(tree, f.spokeUIDs["cm"]) {
		t.Errorf("tree of app1 = %s", tree)
	}
	plain, found, err := proxy.Get(ctx, "app|resources-tree|app1|1.8.3")
	if err != nil || !found || !strings.Contains(string(plain), `"name":"creds"`) {
		t.Errorf("uncompressed tree of app1 = %q, %v, %v", plain, found, err)
	}
	gz, _, err = proxy.Get(ctx, "app|managed-resources|app1|1.8.3.gz")
	if err != nil {
		t.Fatal(err)
	}
	if m := gunzip(t, gz); strings.Contains(m, "aHVudGVyMg") || !strings.Contains(m, "++++++++") {
		t.Errorf("managed resources of app1 keep Secret data: %s", m)
	}
	if _, found, err := proxy.Get(ctx, "app|managed-resources|app1|2|1.8.3.gz"); err != nil || found {
		t.Errorf("an unknown key: found %v, %v", found, err)
	}
	gz, found, err = proxy.Get(ctx, "cluster|info|https://c1.ocm-pull.invalid|1.8.3.gz")
	if err != nil || !found || !strings.Contains(gunzip(t, gz), "1.33") {
		t.Errorf("cluster info of c1: found %v, %v", found, err)
	}
	if _, found, err := proxy.Get(ctx, "cluster|info|https://c2.ocm-pull.invalid|1.8.3.gz"); err != nil || found {
		t.Errorf("cluster info of a cluster without agent: found %v, %v (want a miss)", found, err)
	}

	// The hub's own keys and Applications: the hub's redis.
	gz, found, err = proxy.Get(ctx, "app|resources-tree|local|1.8.3.gz")
	if err != nil || !found || !strings.Contains(gunzip(t, gz), "hub-own") {
		t.Errorf("tree of the hub's own Application: found %v, %v", found, err)
	}
	if v, found, err := proxy.Get(ctx, "some|other|key"); err != nil || found {
		t.Errorf("another key: %q %v %v", v, found, err)
	}

	for key, want := range map[string]string{
		"app|resources-tree|app2|1.8.3.gz": "was not delivered",
		"app|resources-tree|app3|1.8.3.gz": "not connected",
	} {
		if _, _, err := proxy.Get(ctx, key); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GET %s: %v, want an error saying %q", key, err, want)
		}
	}
}

// testRedisProxySubscription: argocd-server's subscription to a pulled Application's tree changes is made on
// its cluster, and the cluster's notifications reach it.
func testRedisProxySubscription(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxy := &resp.Client{Addr: f.redisProxy}
	got := make(chan struct{}, 10)
	if _, err := proxy.Subscribe(ctx, "app|managed-resources|app1|1.8.3", func([]byte) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a notification of app1's cluster", func() error {
		if err := publish(ctx, f.spokeRedis, "app|managed-resources|app1|1.8.3"); err != nil {
			return err
		}
		select {
		case <-got:
			return nil
		case <-time.After(500 * time.Millisecond):
			return fmt.Errorf("no notification")
		}
	})
}

// testKubeProxy: argocd-server's reads of a managed cluster through the console: discovery and the resources,
// events of the delivered Applications' trees are answered, Secret data replaced; a resource of no delivered
// Application, a list, a write, a watch, another cluster's certificate and a certificate of another CA are refused.
func testKubeProxy(t *testing.T, f *fixture) {
	c1 := f.client(t, "c1", f.ca)

	body := f.get(t, c1, "c1", "/api/v1/namespaces/gb/configmaps/cm", http.StatusOK)
	if !strings.Contains(body, `"color":"blue"`) {
		t.Errorf("configmap cm = %s", body)
	}
	if body := f.get(t, c1, "c1", "/api/v1/namespaces/gb/secrets/creds", http.StatusOK); strings.Contains(body, "aHVudGVyMg") || !strings.Contains(body, "++++++++") {
		t.Errorf("secret creds keeps its data: %s", body)
	}
	if body := f.get(t, c1, "c1", "/api/v1", http.StatusOK); !strings.Contains(body, `"configmaps"`) {
		t.Errorf("discovery of /api/v1 = %.200s", body)
	}
	selector := url.QueryEscape("involvedObject.name=cm,involvedObject.namespace=gb,involvedObject.uid=" + f.spokeUIDs["cm"])
	if body := f.get(t, c1, "c1", "/api/v1/namespaces/gb/events?fieldSelector="+selector, http.StatusOK); !strings.Contains(body, "an event of cm") {
		t.Errorf("events of cm = %s", body)
	}

	for path, code := range map[string]int{
		"/api/v1/namespaces/gb/configmaps/other":      http.StatusForbidden,
		"/api/v1/namespaces/gb/secrets/other-creds":   http.StatusForbidden,
		"/api/v1/namespaces/gb/configmaps":            http.StatusForbidden,
		"/api/v1/namespaces/gb/secrets":               http.StatusForbidden,
		"/api/v1/namespaces/gb/events":                http.StatusForbidden,
		"/api/v1/namespaces/gb/configmaps/cm?watch=1": http.StatusForbidden,
		"/healthz": http.StatusForbidden,
	} {
		if body := f.get(t, c1, "c1", path, code); strings.Contains(body, "t0k3n") || strings.Contains(body, "private") {
			t.Errorf("%s leaks data: %s", path, body)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, "https://c1.ocm-pull.invalid/api/v1/namespaces/gb/configmaps/cm", nil)
	if resp, err := c1.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE through the console: %v %v", resp, err)
	}

	// c1's certificate does not open c2, and a certificate the console CA did not issue opens nothing.
	if body := f.get(t, c1, "c2", "/api/v1", http.StatusForbidden); !strings.Contains(body, "may not read cluster c2") {
		t.Errorf("c1's certificate on c2: %s", body)
	}
	otherPair, err := pki.NewCA("another-ca", time.Now(), time.Hour)
	mustDo(t, err)
	other, err := pki.LoadCA(otherPair)
	mustDo(t, err)
	if resp, err := f.client(t, "c1", other).Get("https://c1.ocm-pull.invalid/api/v1/namespaces/gb/configmaps/cm"); err == nil {
		t.Errorf("a certificate of another CA read cluster c1: %s", resp.Status)
	}

	// A cluster without an agent: a clear error at once.
	c2 := f.client(t, "c2", f.ca)
	if body := f.get(t, c2, "c2", "/api/v1", http.StatusServiceUnavailable); !strings.Contains(body, "not connected") {
		t.Errorf("cluster without an agent: %s", body)
	}
}

// client is an HTTP client that reaches a cluster through the kube proxy, as argocd-server does with the
// cluster secret's proxyUrl and TLS config, with a client certificate for cluster issued by ca.
func (f *fixture) client(t *testing.T, cluster string, ca *pki.CA) *http.Client {
	t.Helper()
	pair, err := ca.Issue(console.ConsoleIdentityPrefix+cluster, nil, time.Now(), time.Hour)
	mustDo(t, err)
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	mustDo(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(f.ca.Cert)
	proxyURL, _ := url.Parse("http://" + f.kubeProxy)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "console.ocm-pull.invalid", MinVersion: tls.VersionTLS12}}}
}

func (f *fixture) get(t *testing.T, c *http.Client, cluster, path string, code int) string {
	t.Helper()
	resp, err := c.Get("https://" + cluster + ".ocm-pull.invalid" + path)
	if err != nil {
		t.Errorf("GET %s on %s: %v", path, cluster, err)
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Errorf("GET %s on %s: %s, want %d: %.300s", path, cluster, resp.Status, code, body)
	}
	return string(body)
}

func startRedis(t *testing.T, name string) (*resp.Client, string) {
	t.Helper()
	p, addr, err := loopback.StartRedis(context.Background(), t.TempDir(), name)
	mustDo(t, err)
	t.Cleanup(p.Kill)
	c := &resp.Client{Addr: addr}
	t.Cleanup(c.Close)
	return c, addr
}

func serve(t *testing.T, ctx context.Context, fn func(context.Context, net.Listener) error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	mustDo(t, err)
	go func() { _ = fn(ctx, l) }()
	return l.Addr().String()
}

func setGz(t *testing.T, c *resp.Client, key, value string) {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(value))
	mustDo(t, w.Close())
	mustDo(t, command(context.Background(), c.Addr, "SET", key, b.String()))
}

func publish(ctx context.Context, c *resp.Client, channel string) error {
	return command(ctx, c.Addr, "PUBLISH", channel, "")
}

// command runs one command on a redis of the test.
func command(ctx context.Context, addr string, args ...string) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write(resp.AppendCommand(nil, args...)); err != nil {
		return err
	}
	v, err := resp.NewReader(conn).ReadValue()
	if err != nil {
		return err
	}
	return v.Err()
}

func gunzip(t *testing.T, gz []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(gz))
	mustDo(t, err)
	b, err := io.ReadAll(r)
	mustDo(t, err)
	return string(b)
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
