package loopback

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User is an extra identity the apiserver accepts by bearer token, for tests of RBAC.
type User struct {
	Name   string
	Groups []string
}

// Cluster is one kube-apiserver (the hub or a managed cluster) on loopback.
type Cluster struct {
	Name string
	// Dir holds the cluster's certificates, kubeconfig and logs.
	Dir string
	// URL is the apiserver's https address.
	URL string
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string

	caData []byte
	tokens map[string]string // user name -> token
	proc   *Process
	kcm    *Process
	extra  []*Process // kube-scheduler, KWOK
}

// Config returns a rest.Config for the cluster admin (group system:masters).
func (c *Cluster) Config() *rest.Config { return c.UserConfig("admin") }

// UserConfig returns a rest.Config for one of the users declared in Options.Users.
func (c *Cluster) UserConfig(user string) *rest.Config {
	token, ok := c.tokens[user]
	if !ok {
		panic(fmt.Sprintf("loopback: cluster %s has no user %q", c.Name, user))
	}
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.caData},
		QPS:             -1, // no client-side throttling in tests
	}
}

// WriteKubeconfig writes a kubeconfig file for a user and returns its path.
func (c *Cluster) WriteKubeconfig(user string) (string, error) {
	cfg := c.UserConfig(user)
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: user}
	kc.CurrentContext = c.Name
	path := filepath.Join(c.Dir, "kubeconfig")
	if user != "admin" {
		path = filepath.Join(c.Dir, "kubeconfig-"+user)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig for %s: %w", c.Name, err)
	}
	return path, nil
}

// Stop stops the cluster's processes.
func (c *Cluster) Stop() {
	for _, p := range c.extra {
		p.Stop(10 * time.Second)
	}
	if c.kcm != nil {
		c.kcm.Stop(10 * time.Second)
	}
	c.proc.Stop(15 * time.Second)
}

type apiserverSpec struct {
	name    string
	dir     string
	etcdURL string
	users   []User
	saKey   string
	args    []string
	env     []string
}

func startAPIServer(ctx context.Context, spec apiserverSpec) (*Cluster, error) {
	bin, err := Binary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(spec.dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("create cert dir: %w", err)
	}
	tokens := map[string]string{}
	var tokenLines []string
	for _, u := range append([]User{{Name: "admin", Groups: []string{"system:masters"}}}, spec.users...) {
		tok := RandomToken()
		tokens[u.Name] = tok
		tokenLines = append(tokenLines, fmt.Sprintf("%s,%s,%s,%q", tok, u.Name, u.Name, strings.Join(u.Groups, ",")))
	}
	tokenFile := filepath.Join(spec.dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(tokenLines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}

	var lastErr error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		proc, err := StartProcess(ProcessSpec{
			Name: "kube-apiserver-" + spec.name,
			Path: bin,
			Args: append([]string{
				"--etcd-servers=" + spec.etcdURL,
				"--etcd-prefix=/" + spec.name,
				"--bind-address=127.0.0.1",
				"--advertise-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", port),
				"--cert-dir=" + certDir,
				"--token-auth-file=" + tokenFile,
				"--authorization-mode=RBAC",
				"--service-account-issuer=https://kubernetes.default.svc",
				"--service-account-key-file=" + spec.saKey,
				"--service-account-signing-key-file=" + spec.saKey,
				"--service-cluster-ip-range=10.0.0.0/24",
				"--allow-privileged=true",
				"--disable-admission-plugins=ServiceAccount",
				"--endpoint-reconciler-type=none",
				"--enable-priority-and-fairness=false",
				"--max-requests-inflight=1000",
				"--max-mutating-requests-inflight=500",
				"--v=0",
			}, spec.args...),
			LogPath: filepath.Join(spec.dir, "logs", "kube-apiserver.log"),
			Env:     spec.env,
		})
		if err != nil {
			return nil, err
		}
		c := &Cluster{
			Name:   spec.name,
			Dir:    spec.dir,
			URL:    fmt.Sprintf("https://127.0.0.1:%d", port),
			tokens: tokens,
			proc:   proc,
		}
		insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness probe of our own loopback apiserver before its CA is read
		lastErr = proc.WaitReady(ctx, func(ctx context.Context) error {
			return httpOK(ctx, insecure, c.URL+"/readyz", tokens["admin"])
		})
		if lastErr == nil {
			c.caData, err = os.ReadFile(filepath.Join(certDir, "apiserver.crt")) //nolint:gosec // our own cert dir
			if err != nil {
				proc.Kill()
				return nil, fmt.Errorf("read apiserver certificate: %w", err)
			}
			if c.Kubeconfig, err = c.WriteKubeconfig("admin"); err != nil {
				proc.Kill()
				return nil, err
			}
			return c, nil
		}
		proc.Kill()
		if !strings.Contains(lastErr.Error(), "address already in use") {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

// startGarbageCollector runs kube-controller-manager with only the garbage collector and namespace
// controllers, so that owner references and namespace deletion behave as on a real cluster.
func (c *Cluster) startGarbageCollector(ctx context.Context) error {
	return c.startControllerManager(ctx, "garbagecollector,namespace")
}

// startControllerManager runs kube-controller-manager with the given controllers only.
func (c *Cluster) startControllerManager(ctx context.Context, controllers string) error {
	bin, err := Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	proc, err := StartProcess(ProcessSpec{
		Name: "kube-controller-manager-" + c.Name,
		Path: bin,
		Args: []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--controllers=" + controllers,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=0",
			// The default client limits (20 QPS) would hold the garbage collector to 20 deletes per second;
			// a hub at fleet scale runs with more.
			"--concurrent-gc-syncs=20",
			"--kube-api-qps=300",
			"--kube-api-burst=600",
			"--v=0",
		},
		LogPath: filepath.Join(c.Dir, "logs", "kube-controller-manager.log"),
	})
	if err != nil {
		return err
	}
	c.kcm = proc
	// kube-controller-manager has no readiness endpoint with --secure-port=0; give it a moment and make
	// sure it did not exit at once on a bad flag.
	select {
	case <-proc.Exited():
		return fmt.Errorf("kube-controller-manager for %s exited at start; log: %s\n%s", c.Name, proc.LogPath, tail(proc.LogPath, 20))
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func writeServiceAccountKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

// RandomToken returns a random hex token.
func RandomToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Pid is the process ID of the cluster's kube-apiserver.
func (c *Cluster) Pid() int { return c.proc.Pid() }

// ControllerManagerPid is the process ID of the cluster's kube-controller-manager (0 without one).
func (c *Cluster) ControllerManagerPid() int {
	if c.kcm == nil {
		return 0
	}
	return c.kcm.Pid()
}
