package loopback

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// CMPPlugin is an Argo CD Config Management Plugin served by argocd-cmp-server beside the hub's repo server, as
// a sidecar of argocd-repo-server serves it in a cluster: its socket in the plugins directory both share.
type CMPPlugin struct {
	// Name is the plugin's metadata.name; Applications name it in spec.source.plugin.name.
	Name string
	// Config is the plugin's plugin.yaml (a ConfigManagementPlugin).
	Config []byte
	// Path lists directories put first on the PATH of the plugin's commands.
	Path []string
	// Env is extra environment of the plugin's commands.
	Env []string
}

// startHubPlugins starts an argocd-cmp-server per plugin and returns the plugins directory the repo server must
// be pointed at (ARGOCD_PLUGINSOCKFILEPATH).
func (a *HubArgoCD) startHubPlugins(ctx context.Context, dir string, plugins []CMPPlugin) (string, error) {
	argocdBin, err := Binary("argocd")
	if err != nil {
		return "", err
	}
	// The multi-call Argo CD binary takes its role from its name.
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o750); err != nil {
		return "", fmt.Errorf("create %s: %w", binDir, err)
	}
	cmpServer := filepath.Join(binDir, "argocd-cmp-server")
	if err := os.Symlink(argocdBin, cmpServer); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("link argocd-cmp-server: %w", err)
	}
	sockets := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(sockets, 0o750); err != nil {
		return "", fmt.Errorf("create %s: %w", sockets, err)
	}
	for _, pl := range plugins {
		pdir := filepath.Join(dir, "cmp-"+pl.Name)
		if err := os.MkdirAll(filepath.Join(pdir, "config"), 0o750); err != nil {
			return "", fmt.Errorf("create %s: %w", pdir, err)
		}
		if err := os.MkdirAll(filepath.Join(pdir, "tmp"), 0o750); err != nil {
			return "", fmt.Errorf("create %s: %w", pdir, err)
		}
		if err := os.WriteFile(filepath.Join(pdir, "config", "plugin.yaml"), pl.Config, 0o600); err != nil {
			return "", fmt.Errorf("write plugin.yaml of %s: %w", pl.Name, err)
		}
		path := strings.Join(append(append([]string{}, pl.Path...), os.Getenv("PATH")), string(os.PathListSeparator))
		env := append([]string{"ARGOCD_PLUGINSOCKFILEPATH=" + sockets, "TMPDIR=" + filepath.Join(pdir, "tmp"),
			"HOME=" + filepath.Join(pdir, "tmp"), "PATH=" + path}, pl.Env...)
		p, err := StartProcess(ProcessSpec{
			Name: "argocd-cmp-server-" + pl.Name, Path: cmpServer,
			Args: []string{"--config-dir-path", filepath.Join(pdir, "config"), "--logformat", "text"},
			Env:  env, Dir: filepath.Join(pdir, "tmp"), LogPath: filepath.Join(dir, "logs", "argocd-cmp-server-"+pl.Name+".log"),
		})
		if err != nil {
			return "", err
		}
		a.procs = append(a.procs, p)
		socket := filepath.Join(sockets, pl.Name+".sock")
		err = p.WaitReady(ctx, func(context.Context) error {
			_, err := os.Stat(socket)
			return err
		})
		if err != nil {
			return "", err
		}
	}
	return sockets, nil
}

// startHubApplicationController starts Argo CD's application controller for the hub's own Applications, with
// https://kubernetes.default.svc meaning the hub. It binds its metrics port on every interface, so with root it
// runs in a private network namespace that reaches the hub's apiserver, redis and repo server.
func (a *HubArgoCD) startHubApplicationController(ctx context.Context, hub *Cluster, dir, kubeconfig, scratch string) error {
	controller, err := Binary("argocd-application-controller")
	if err != nil {
		return err
	}
	wrap := func(s ProcessSpec) ProcessSpec { return s }
	metricsPort := 8082
	if NetNSSupported() {
		if a.netns, err = NewNetNS(ctx, dir, "argocd-hub"); err != nil {
			return err
		}
		for _, addr := range []string{hostPort(hub.URL), a.Redis, a.RepoServer} {
			if err := a.netns.Forward(addr); err != nil {
				return err
			}
		}
		wrap = a.netns.Command
	} else if metricsPort, err = FreePort(); err != nil {
		return err
	}
	p, err := StartProcess(wrap(ProcessSpec{
		Name: "argocd-application-controller-hub", Path: controller,
		Args: []string{"--redis", a.Redis, "--repo-server", a.RepoServer, "--metrics-port", strconv.Itoa(metricsPort),
			"--kubeconfig", kubeconfig, "--namespace", a.Namespace},
		Env: []string{"KUBECONFIG=" + kubeconfig, "TMPDIR=" + scratch, "HOME=" + scratch, "ARGOCD_FAKE_IN_CLUSTER=true"},
		Dir: scratch, LogPath: filepath.Join(dir, "logs", "argocd-application-controller-hub.log"),
	}))
	if err != nil {
		return err
	}
	a.procs = append(a.procs, p)
	return nil
}

// addSettings merges entries into argocd-cm.
func addSettings(ctx context.Context, c *Cluster, namespace string, settings map[string]string) error {
	if len(settings) == 0 {
		return nil
	}
	kube, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"data": settings})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().ConfigMaps(namespace).Patch(ctx, "argocd-cm", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("add settings to argocd-cm on %s: %w", c.Name, err)
	}
	return nil
}
