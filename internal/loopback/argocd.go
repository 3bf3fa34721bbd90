package loopback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// redisBinDirs is where Debian installs redis-server.
var redisBinDirs = []string{"/usr/bin", "/usr/sbin"}

// ArgoCD is a managed cluster's own Argo CD: redis, repo server and application controller, reconciling the
// Applications in the cluster's argocd namespace against the cluster itself. With root the three run in a
// private network namespace (the application controller listens on every interface), with the cluster's
// apiserver and the git server forwarded into it.
type ArgoCD struct {
	Namespace string
	// Redis is the address of its redis as the host reaches it (the agent reads Argo CD's cache there).
	Redis string
	procs []*Process
	netns *NetNS
}

// ArgoCDOptions configure StartArgoCD.
type ArgoCDOptions struct {
	// Dir holds the processes' logs and scratch space.
	Dir string
	// Namespace is Argo CD's namespace on the cluster.
	Namespace string
	// Forward lists host loopback addresses the processes must reach (the git server).
	Forward []string
	// ReconciliationTimeout is Argo CD's timeout.reconciliation (how often it refreshes from git).
	ReconciliationTimeout time.Duration
	// RedisHostAddr, when set, is where the host reaches the cluster's redis (a free loopback address the
	// caller chose, so that an agent can be told it before Argo CD starts).
	RedisHostAddr string
}

// StartArgoCD installs Argo CD's settings into a cluster and starts its redis, repo server and application
// controller.
func StartArgoCD(ctx context.Context, c *Cluster, o ArgoCDOptions) (_ *ArgoCD, err error) {
	if o.Namespace == "" {
		o.Namespace = "argocd"
	}
	if err := PrepareArgoCDNamespace(ctx, c, o.Namespace, o.ReconciliationTimeout); err != nil {
		return nil, err
	}
	a := &ArgoCD{Namespace: o.Namespace}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	wrap := func(s ProcessSpec) ProcessSpec { return s }
	redisPort, repoPort, repoMetricsPort, ctrlMetricsPort := 6379, 8081, 8084, 8082
	if NetNSSupported() {
		if a.netns, err = NewNetNS(ctx, o.Dir, "argocd-"+c.Name); err != nil {
			return nil, err
		}
		if err := a.netns.Forward(hostPort(c.URL)); err != nil {
			return nil, err
		}
		for _, addr := range o.Forward {
			if err := a.netns.Forward(addr); err != nil {
				return nil, err
			}
		}
		wrap = a.netns.Command
	} else {
		// Without a private namespace every port must be free on the host.
		ports, err := FreePorts(4)
		if err != nil {
			return nil, err
		}
		redisPort, repoPort, repoMetricsPort, ctrlMetricsPort = ports[0], ports[1], ports[2], ports[3]
	}

	kubeconfig, err := namespacedKubeconfig(c, o.Namespace, filepath.Join(o.Dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	if o.RedisHostAddr != "" && a.netns == nil {
		// Without a private namespace the redis listens on the host: on the address asked for.
		redisPort, _ = strconv.Atoi(portOnly(o.RedisHostAddr))
	}
	redis, err := redisSpec("redis-"+c.Name, strconv.Itoa(redisPort))
	if err != nil {
		return nil, err
	}
	repoServer, err := Binary("argocd-repo-server")
	if err != nil {
		return nil, err
	}
	controller, err := Binary("argocd-application-controller")
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(o.Dir, "tmp")
	if err := os.MkdirAll(scratch, 0o750); err != nil {
		return nil, fmt.Errorf("create argocd scratch dir: %w", err)
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(redisPort)
	a.Redis = redisAddr
	repoAddr := "127.0.0.1:" + strconv.Itoa(repoPort)
	env := []string{"KUBECONFIG=" + kubeconfig, "TMPDIR=" + scratch, "HOME=" + scratch, "ARGOCD_GPG_ENABLED=false", "ARGOCD_FAKE_IN_CLUSTER=true"}
	specs := []ProcessSpec{redis, {
		Name: "argocd-repo-server-" + c.Name, Path: repoServer,
		Args: []string{"--address", "127.0.0.1", "--port", strconv.Itoa(repoPort), "--metrics-address", "127.0.0.1",
			"--metrics-port", strconv.Itoa(repoMetricsPort), "--redis", redisAddr},
	}, {
		Name: "argocd-application-controller-" + c.Name, Path: controller,
		Args: []string{"--redis", redisAddr, "--repo-server", repoAddr, "--metrics-port", strconv.Itoa(ctrlMetricsPort),
			"--kubeconfig", kubeconfig, "--namespace", o.Namespace},
	}}
	for _, s := range specs {
		s.Env, s.Dir, s.LogPath = env, scratch, filepath.Join(o.Dir, "logs", s.Name+".log")
		p, err := StartProcess(wrap(s))
		if err != nil {
			return nil, err
		}
		a.procs = append(a.procs, p)
		if s.Name == redis.Name {
			if err := waitTCP(ctx, p, a.netns, redisAddr); err != nil {
				return nil, err
			}
			if o.RedisHostAddr != "" && a.netns != nil {
				if err := a.netns.Expose(o.RedisHostAddr, redisAddr); err != nil {
					return nil, err
				}
				a.Redis = o.RedisHostAddr
			}
		}
	}
	return a, nil
}

// waitTCP waits until addr accepts connections (inside the namespace when there is one).
func waitTCP(ctx context.Context, p *Process, n *NetNS, addr string) error {
	return p.WaitReady(ctx, func(ctx context.Context) error {
		if n != nil {
			return n.run(ctx, "bash", "-c", "exec 3<>/dev/tcp/"+hostOnly(addr)+"/"+portOnly(addr))
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// Stop stops Argo CD's processes.
func (a *ArgoCD) Stop() {
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].Stop(10 * time.Second)
	}
	if a.netns != nil {
		a.netns.Stop()
	}
}

// PrepareArgoCDNamespace creates what Argo CD expects in its namespace: the namespace, argocd-cm,
// argocd-secret and the default AppProject.
func PrepareArgoCDNamespace(ctx context.Context, c *Cluster, namespace string, reconciliation time.Duration) error {
	kube, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: namespace, Labels: partOf}, Data: map[string]string{}}
	if reconciliation > 0 {
		cm.Data["timeout.reconciliation"] = reconciliation.String()
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: namespace, Labels: partOf},
		StringData: map[string]string{"server.secretkey": hex.EncodeToString(key)}}
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "default", "namespace": namespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"namespace": "*", "server": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	creates := []func() error{
		func() error {
			_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{})
			return err
		},
		func() error {
			gvr := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
			_, err := dyn.Resource(gvr).Namespace(namespace).Create(ctx, project, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range creates {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("prepare argocd namespace %s on %s: %w", namespace, c.Name, err)
		}
	}
	return nil
}

// namespacedKubeconfig writes an admin kubeconfig whose context defaults to the namespace: Argo CD reads its
// own namespace from it when it does not run in a pod.
func namespacedKubeconfig(c *Cluster, namespace, path string) (string, error) {
	cfg := c.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin", Namespace: namespace}
	kc.CurrentContext = c.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", fmt.Errorf("create kubeconfig dir: %w", err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return path, nil
}

// StartApplicationSetController runs Argo CD's ApplicationSet controller on the hub for one namespace, with
// every port on loopback. repoServer is the address of the hub's repo server (HubArgoCD.RepoServer), which
// the Git generators ask for a repository's files and directories.
func StartApplicationSetController(ctx context.Context, hub *Cluster, namespace, dir, repoServer string) (*Process, error) {
	bin, err := Binary("argocd-applicationset-controller")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := namespacedKubeconfig(hub, namespace, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	p, err := StartProcess(ProcessSpec{
		Name: "argocd-applicationset-controller",
		Path: bin,
		Args: []string{"--kubeconfig", kubeconfig, "--namespace", namespace,
			"--metrics-addr", addr(0), "--probe-addr", addr(1), "--webhook-addr", addr(2),
			"--argocd-repo-server", repoServer, "--policy", "sync"},
		Env:     []string{"KUBECONFIG=" + kubeconfig},
		Dir:     dir,
		LogPath: filepath.Join(dir, "logs", "argocd-applicationset-controller.log"),
	})
	if err != nil {
		return nil, err
	}
	// The controller registers no health checks; its probe server answering (404) means its manager runs.
	err = p.WaitReady(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr(1)+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	if err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

func hostPort(url string) string {
	u := url
	for _, prefix := range []string{"https://", "http://"} {
		if len(u) > len(prefix) && u[:len(prefix)] == prefix {
			u = u[len(prefix):]
		}
	}
	return u
}

func hostOnly(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func portOnly(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
