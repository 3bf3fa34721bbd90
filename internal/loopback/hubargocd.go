package loopback

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// HubArgoCD is the hub's Argo CD console: redis, a repo server and argocd-server with its web UI, every one
// of them listening on loopback only. argocd-server serves the UI and its API over plain HTTP at URL; the
// admin user logs in with AdminPassword.
type HubArgoCD struct {
	// URL is argocd-server's address (http://127.0.0.1:PORT): the web UI, the REST API and the gRPC-web API.
	URL string
	// AdminPassword is the password of the admin user.
	AdminPassword string
	// RepoServer is the repo server's address, for the hub's ApplicationSet controller.
	RepoServer string
	// Redis is the address of the hub's redis, which argocd-server reads resource trees from.
	Redis string
	// Namespace is Argo CD's namespace on the hub.
	Namespace string

	procs []*Process
	netns *NetNS
}

// HubArgoCDOptions configure StartHubArgoCD.
type HubArgoCDOptions struct {
	// Dir holds the processes' logs and scratch space.
	Dir string
	// Namespace is Argo CD's namespace on the hub ("argocd" when empty).
	Namespace string
	// AdminPassword is the admin user's password; a random one when empty.
	AdminPassword string
	// ApplicationController also runs Argo CD's application controller, for Applications the hub's Argo CD
	// reconciles itself (the CMP variant), with https://kubernetes.default.svc meaning the hub.
	ApplicationController bool
	// Plugins run as argocd-cmp-server sidecars of the repo server.
	Plugins []CMPPlugin
	// Settings are added to argocd-cm (resource customizations, timeout.reconciliation).
	Settings map[string]string
	// Redis is the address of the hub's redis (a free loopback address the caller chose); a free port when empty.
	Redis string
	// ServerRedis is the redis argocd-server uses (argocd-pull server's console redis proxy); the hub's redis
	// when empty.
	ServerRedis string
}

// StartHubArgoCD prepares Argo CD's namespace on the hub (settings, the admin password) and starts redis, a
// repo server and argocd-server. Every listener is given a loopback address and a free port, so none of
// these processes needs a private network namespace.
func StartHubArgoCD(ctx context.Context, hub *Cluster, o HubArgoCDOptions) (_ *HubArgoCD, err error) {
	if o.Namespace == "" {
		o.Namespace = "argocd"
	}
	if o.AdminPassword == "" {
		o.AdminPassword = RandomToken()[:16]
	}
	if err := PrepareArgoCDNamespace(ctx, hub, o.Namespace, 0); err != nil {
		return nil, err
	}
	if err := setAdminPassword(ctx, hub, o.Namespace, o.AdminPassword); err != nil {
		return nil, err
	}
	if err := addSettings(ctx, hub, o.Namespace, o.Settings); err != nil {
		return nil, err
	}
	repoServer, err := Binary("argocd-repo-server")
	if err != nil {
		return nil, err
	}
	server, err := Binary("argocd-server")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := namespacedKubeconfig(hub, o.Namespace, filepath.Join(o.Dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(o.Dir, "tmp")
	if err := os.MkdirAll(scratch, 0o750); err != nil {
		return nil, fmt.Errorf("create argocd scratch dir: %w", err)
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	a := &HubArgoCD{
		URL:           "http://" + addr(0),
		AdminPassword: o.AdminPassword,
		RepoServer:    addr(1),
		Redis:         addr(2),
		Namespace:     o.Namespace,
	}
	if o.Redis != "" {
		a.Redis = o.Redis
	}
	serverRedis := a.Redis
	if o.ServerRedis != "" {
		serverRedis = o.ServerRedis
	}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	env := []string{"KUBECONFIG=" + kubeconfig, "TMPDIR=" + scratch, "HOME=" + scratch, "ARGOCD_GPG_ENABLED=false"}
	if len(o.Plugins) > 0 {
		sockets, err := a.startHubPlugins(ctx, o.Dir, o.Plugins)
		if err != nil {
			return nil, err
		}
		env = append(env, "ARGOCD_PLUGINSOCKFILEPATH="+sockets)
	}
	redis, err := redisSpec("redis-hub", portOnly(a.Redis))
	if err != nil {
		return nil, err
	}
	specs := []ProcessSpec{redis, {
		Name: "argocd-repo-server-hub", Path: repoServer,
		Args: []string{"--address", "127.0.0.1", "--port", strconv.Itoa(ports[1]), "--metrics-address", "127.0.0.1",
			"--metrics-port", strconv.Itoa(ports[3]), "--redis", a.Redis},
	}, {
		Name: "argocd-server-hub", Path: server,
		Args: []string{"--insecure", "--address", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
			"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(ports[4]),
			"--namespace", o.Namespace, "--redis", serverRedis, "--repo-server", a.RepoServer,
			// No Dex runs; its default address would be dialled only for SSO, which is not configured.
			"--dex-server", "http://127.0.0.1:" + strconv.Itoa(ports[5]),
			// The UI is embedded in the binary; no extra static assets.
			"--staticassets", filepath.Join(scratch, "no-extra-assets")},
	}}
	for _, s := range specs {
		s.Env, s.Dir, s.LogPath = env, scratch, filepath.Join(o.Dir, "logs", s.Name+".log")
		p, err := StartProcess(s)
		if err != nil {
			return nil, err
		}
		a.procs = append(a.procs, p)
		if s.Name == redis.Name {
			if err := waitTCP(ctx, p, nil, a.Redis); err != nil {
				return nil, err
			}
		}
	}
	srv := a.procs[len(a.procs)-1]
	err = srv.WaitReady(ctx, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, a.URL+"/healthz?full=true", "")
	})
	if err != nil {
		return nil, err
	}
	if o.ApplicationController {
		if err := a.startHubApplicationController(ctx, hub, o.Dir, kubeconfig, scratch); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Login logs the admin user in through argocd-server's session API and returns the session token (also the
// value of the argocd.token cookie the web UI uses).
func (a *HubArgoCD) Login(ctx context.Context) (string, error) {
	body, err := json.Marshal(map[string]string{"username": "admin", "password": a.AdminPassword})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/api/v1/session", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("argocd login: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("argocd login: %s", resp.Status)
	}
	var session struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&session); err != nil {
		return "", fmt.Errorf("decode argocd session: %w", err)
	}
	if session.Token == "" {
		return "", fmt.Errorf("argocd login: empty token")
	}
	return session.Token, nil
}

// Stop stops argocd-server, the repo server, redis and, when they run, the application controller and the
// plugins.
func (a *HubArgoCD) Stop() {
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].Stop(10 * time.Second)
	}
	if a.netns != nil {
		a.netns.Stop()
	}
}

// Pids are the process IDs of the hub's Argo CD processes (redis, repo server, argocd-server).
func (a *HubArgoCD) Pids() []int {
	pids := make([]int, 0, len(a.procs))
	for _, p := range a.procs {
		pids = append(pids, p.Pid())
	}
	return pids
}

// setAdminPassword writes the admin password (bcrypt) and its change time into argocd-secret, as
// `argocd account update-password` does.
func setAdminPassword(ctx context.Context, c *Cluster, namespace, password string) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("hash admin password: %w", err)
	}
	kube, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"stringData": map[string]string{
		"admin.password":      string(hash),
		"admin.passwordMtime": time.Now().UTC().Format(time.RFC3339),
	}})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Secrets(namespace).Patch(ctx, "argocd-secret", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set argocd admin password on %s: %w", c.Name, err)
	}
	return nil
}
