package charts

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// kubelet runs the containers of pods that Helm installed as processes of the argocd-pull binary built by the
// test, since no kubelet or container runtime runs here. It provides only what a kubelet, the image and the
// cluster's network would, translated to this machine:
//   - the image's entrypoint is the binary; its environment is the image's (hack/image) and the container's:
//     values, Secret and ConfigMap keys, and the pod's name and namespace (fieldRef), nothing of the test's;
//   - volumes (Secret, ConfigMap, projected, emptyDir) are files in a directory per pod (the container's root
//     file system): the paths they are mounted at are mapped into it in arguments, environment values and the
//     mounted files, as a chroot would;
//   - the ServiceAccount token a kubelet mounts for the in-cluster configuration is a kubeconfig (KUBECONFIG) with
//     a token of the pod's ServiceAccount from the TokenRequest API, so the apiserver enforces the pod's RBAC;
//   - container ports are loopback ports: a bind address ":8080" becomes 127.0.0.1:<free port>;
//   - Service addresses (<service>.<namespace>.svc:<port>) are the loopback ports of the pods they select;
//   - the pod's runAsUser, runAsGroup and fsGroup are the process's credentials when the test runs as root;
//   - probes are the kubelet's HTTP GETs on those ports (certificates unverified, as a kubelet does).
type kubelet struct {
	cluster *loopback.Cluster
	kube    kubernetes.Interface
	// services maps in-cluster addresses to loopback ones.
	services map[string]string
}

func newKubelet(t *testing.T, cluster *loopback.Cluster) *kubelet {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &kubelet{cluster: cluster, kube: kube, services: map[string]string{}}
}

// imageEnv is the environment of the image's configuration (hack/image/main.go).
var imageEnv = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/tmp"}

// pod is a running pod: one container, as the charts' pods have.
type pod struct {
	name, namespace string
	labels          map[string]string
	container       corev1.Container
	proc            *loopback.Process
	// ports maps container port numbers to loopback ports.
	ports map[int32]int
}

// runDeployment runs the pod of a Deployment installed on the kubelet's cluster and returns it once it has
// started; ready waits for its readiness probe.
func (k *kubelet) runDeployment(t *testing.T, ns, name string) *pod {
	t.Helper()
	ctx := context.Background()
	d, err := k.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("deployment %s: the kubelet of this test runs pods of one container", name)
	}
	p := &pod{name: name + "-7d9f8c6b5-x2x4q", namespace: ns, labels: d.Spec.Template.Labels, container: spec.Containers[0], ports: map[int32]int{}}
	root := filepath.Join(workDir, "pods", ns, p.name)
	if err := os.MkdirAll(root, 0o755); err != nil { //nolint:gosec // the pod's user must reach its files
		t.Fatal(err)
	}
	for _, cp := range p.container.Ports {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p.ports[cp.ContainerPort] = port
	}
	mounts := k.mountVolumes(t, spec, p, root)
	environ := append([]string{}, imageEnv...)
	environ = append(environ, k.containerEnv(t, p)...)
	translate := func(s string) string { return translatePaths(k.translateAddresses(s), mounts) }
	for i := range environ {
		environ[i] = translate(environ[i])
	}
	if token := spec.AutomountServiceAccountToken; token == nil || *token {
		environ = append(environ, "KUBECONFIG="+k.serviceAccountKubeconfig(t, ns, spec.ServiceAccountName, root))
	}
	args := make([]string, 0, len(p.container.Args))
	for _, a := range p.container.Args {
		args = append(args, p.bindLoopback(translate(a)))
	}
	proc, err := loopback.StartProcess(loopback.ProcessSpec{
		Name: p.name, Path: binary, Args: args, Env: environ, CleanEnv: true, Dir: root,
		LogPath: filepath.Join(env.Dir, "logs", "pods", ns, p.name+".log"), Credential: credential(spec.SecurityContext),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() { proc.Stop(20 * time.Second) })
	t.Logf("pod %s/%s runs argocd-pull %s (log %s)", ns, p.name, strings.Join(args, " "), proc.LogPath)
	return p
}

// mountVolumes writes the pod's volumes for its container's mounts and returns the mount paths mapped to
// their directories.
func (k *kubelet) mountVolumes(t *testing.T, spec corev1.PodSpec, p *pod, root string) map[string]string {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range p.container.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Fatalf("volume mount %s: subPath is not supported by this test's kubelet", m.Name)
		}
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("volume mount %s names no volume", m.Name)
		}
		dir := filepath.Join(root, m.MountPath)
		mounts[m.MountPath] = dir
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // the pod's user reads its volumes
			t.Fatal(err)
		}
		k.writeVolume(t, spec.SecurityContext, p.namespace, v, dir)
	}
	// Mounted files name other mounted files, and Services: translate them now that every path is known.
	for _, dir := range mounts {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if e.IsDir() {
				continue
			}
			data, err := os.ReadFile(path) //nolint:gosec // a file the test wrote
			if err != nil {
				t.Fatal(err)
			}
			translated := translatePaths(k.translateAddresses(string(data)), mounts)
			if translated != string(data) {
				info, _ := os.Stat(path)
				if err := os.WriteFile(path, []byte(translated), info.Mode().Perm()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return mounts
}

// writeVolume writes one volume's files as the kubelet would: owned by the pod's fsGroup, with the volume's
// modes; an emptyDir is writable by all.
func (k *kubelet) writeVolume(t *testing.T, sc *corev1.PodSecurityContext, ns string, v corev1.Volume, dir string) {
	t.Helper()
	ctx := context.Background()
	var files map[string][]byte
	mode := int32(0o644)
	switch {
	case v.EmptyDir != nil:
		if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // an emptyDir is the pod's scratch space
			t.Fatal(err)
		}
		return
	case v.Secret != nil:
		s, err := k.kube.CoreV1().Secrets(ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("volume %s: %v", v.Name, err)
		}
		files = keysToPaths(t, s.Data, v.Secret.Items)
		mode = ptr.Deref(v.Secret.DefaultMode, mode)
	case v.ConfigMap != nil:
		cm, err := k.kube.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("volume %s: %v", v.Name, err)
		}
		files = keysToPaths(t, stringData(cm.Data), v.ConfigMap.Items)
		mode = ptr.Deref(v.ConfigMap.DefaultMode, mode)
	case v.Projected != nil:
		files = map[string][]byte{}
		for _, src := range v.Projected.Sources {
			switch {
			case src.Secret != nil:
				s, err := k.kube.CoreV1().Secrets(ns).Get(ctx, src.Secret.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("volume %s: %v", v.Name, err)
				}
				for path, data := range keysToPaths(t, s.Data, src.Secret.Items) {
					files[path] = data
				}
			case src.ConfigMap != nil:
				cm, err := k.kube.CoreV1().ConfigMaps(ns).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("volume %s: %v", v.Name, err)
				}
				for path, data := range keysToPaths(t, stringData(cm.Data), src.ConfigMap.Items) {
					files[path] = data
				}
			default:
				t.Fatalf("volume %s: this test's kubelet projects Secrets and ConfigMaps only", v.Name)
			}
		}
		mode = ptr.Deref(v.Projected.DefaultMode, mode)
	default:
		t.Fatalf("volume %s: this test's kubelet mounts Secret, ConfigMap, projected and emptyDir volumes only", v.Name)
	}
	for path, data := range files {
		file := filepath.Join(dir, path)
		if err := os.WriteFile(file, data, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, os.FileMode(mode)); err != nil { // beyond the umask
			t.Fatal(err)
		}
		if sc != nil && sc.FSGroup != nil && os.Geteuid() == 0 {
			if err := os.Chown(file, 0, int(*sc.FSGroup)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// keysToPaths maps a Secret's or ConfigMap's keys to file paths: the items when given (each key must exist), else
// every key.
func keysToPaths(t *testing.T, data map[string][]byte, items []corev1.KeyToPath) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	if len(items) == 0 {
		for key, v := range data {
			files[key] = v
		}
		return files
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			t.Fatalf("a volume projects key %s, which its Secret or ConfigMap lacks (the pod would not start)", it.Key)
		}
		files[it.Path] = v
	}
	return files
}

func stringData(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

// containerEnv resolves the container's environment; a missing Secret or key fails the test (the pod would
// not start).
func (k *kubelet) containerEnv(t *testing.T, p *pod) []string {
	t.Helper()
	ctx := context.Background()
	if len(p.container.EnvFrom) != 0 {
		t.Fatal("envFrom is not supported by this test's kubelet")
	}
	env := make([]string, 0, len(p.container.Env))
	for _, e := range p.container.Env {
		value := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
		case from.SecretKeyRef != nil:
			s, err := k.kube.CoreV1().Secrets(p.namespace).Get(ctx, from.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			v, ok := s.Data[from.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, from.SecretKeyRef.Name, from.SecretKeyRef.Key)
			}
			value = string(v)
		case from.ConfigMapKeyRef != nil:
			cm, err := k.kube.CoreV1().ConfigMaps(p.namespace).Get(ctx, from.ConfigMapKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			value = cm.Data[from.ConfigMapKeyRef.Key]
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.name":
			value = p.name
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
			value = p.namespace
		default:
			t.Fatalf("env %s: this test's kubelet does not resolve %v", e.Name, from)
		}
		env = append(env, e.Name+"="+value)
	}
	return env
}

// serviceAccountKubeconfig stands for the token volume a kubelet mounts: a kubeconfig of the cluster with a
// token of the ServiceAccount.
func (k *kubelet) serviceAccountKubeconfig(t *testing.T, ns, serviceAccount, root string) string {
	t.Helper()
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	tr, err := k.kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of service account %s/%s: %v", ns, serviceAccount, err)
	}
	return writeKubeconfig(t, k.cluster, tr.Status.Token, filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount/kubeconfig"), 0o444)
}

// writeKubeconfig writes a kubeconfig of a cluster with a bearer token.
func writeKubeconfig(t *testing.T, c *loopback.Cluster, token, path string, mode os.FileMode) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.Config().CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "user"}
	kc.CurrentContext = c.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // the pod's user reads it
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// credential is the pod's user, group and fsGroup, when the test may switch to them (as root).
func credential(sc *corev1.PodSecurityContext) *syscall.Credential {
	if os.Geteuid() != 0 || sc == nil || sc.RunAsUser == nil {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(ptr.Deref(sc.RunAsGroup, *sc.RunAsUser))}
	if sc.FSGroup != nil {
		cred.Groups = []uint32{uint32(*sc.FSGroup)}
	}
	return cred
}

// bindAddress is a flag value that listens on every interface: ":8080" or "0.0.0.0:8080".
var bindAddress = regexp.MustCompile(`^(--[a-z-]+=)(0\.0\.0\.0)?:([0-9]+)$`)

// bindLoopback makes an argument that binds a container port bind the pod's loopback port instead.
func (p *pod) bindLoopback(arg string) string {
	m := bindAddress.FindStringSubmatch(arg)
	if m == nil {
		return arg
	}
	port, _ := strconv.Atoi(m[3])
	if local, ok := p.ports[int32(port)]; ok {
		return fmt.Sprintf("%s127.0.0.1:%d", m[1], local)
	}
	return arg
}

// translatePaths maps container paths under the mount points into the pod's directory, in one pass (a mapped
// path must not be mapped again).
func translatePaths(s string, mounts map[string]string) string {
	if len(mounts) == 0 {
		return s
	}
	points := make([]string, 0, len(mounts))
	for m := range mounts {
		points = append(points, regexp.QuoteMeta(m))
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	re := regexp.MustCompile(`(^|[=\s:"'])(` + strings.Join(points, "|") + `)(/|$|\s)`)
	return re.ReplaceAllStringFunc(s, func(match string) string {
		m := re.FindStringSubmatch(match)
		return m[1] + mounts[m[2]] + m[3]
	})
}

// translateAddresses maps Service addresses to loopback ones.
func (k *kubelet) translateAddresses(s string) string {
	for from, to := range k.services {
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// addService routes a Service's ports to a pod that it selects.
func (k *kubelet) addService(t *testing.T, ns, name string, p *pod) {
	t.Helper()
	svc, err := k.kube.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range svc.Spec.Selector {
		if p.labels[key] != v {
			t.Fatalf("service %s does not select pod %s (%s=%s)", name, p.name, key, v)
		}
	}
	for _, sp := range svc.Spec.Ports {
		target, ok := containerPort(p.container, sp.TargetPort.String())
		if !ok {
			t.Fatalf("service %s: target port %s is not a port of pod %s", name, sp.TargetPort.String(), p.name)
		}
		k.route(fmt.Sprintf("%s.%s.svc:%d", name, ns, sp.Port), fmt.Sprintf("127.0.0.1:%d", p.ports[target]))
	}
}

// route maps an in-cluster address (and its cluster.local form) to a loopback one.
func (k *kubelet) route(inCluster, local string) {
	k.services[inCluster] = local
	host, port, _ := strings.Cut(inCluster, ":")
	k.services[host+".cluster.local:"+port] = local
}

// probe runs a container probe once, as the kubelet would.
func (p *pod) probe(ctx context.Context, probe *corev1.Probe) error {
	if probe == nil || probe.HTTPGet == nil {
		return fmt.Errorf("pod %s has no HTTP probe", p.name)
	}
	port, ok := containerPort(p.container, probe.HTTPGet.Port.String())
	if !ok {
		return fmt.Errorf("probe port %s is not a container port", probe.HTTPGet.Port.String())
	}
	scheme := strings.ToLower(string(probe.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	url := fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, p.ports[port], probe.HTTPGet.Path)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a kubelet does not verify probes
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// waitReady waits until the readiness and liveness probes pass, or the process exits.
func (p *pod) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := p.proc.WaitReady(ctx, func(ctx context.Context) error {
		if err := p.probe(ctx, p.container.ReadinessProbe); err != nil {
			return err
		}
		return p.probe(ctx, p.container.LivenessProbe)
	})
	if err != nil {
		t.Fatalf("pod %s/%s is not ready: %v", p.namespace, p.name, err)
	}
}

// logHas reports whether the pod's log contains s.
func (p *pod) logHas(t *testing.T, s string) bool {
	t.Helper()
	data, err := os.ReadFile(p.proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), s)
}
