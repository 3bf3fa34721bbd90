package loopback

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// KWOKNodeName is the name of the node KWOK simulates on every cluster that runs workloads.
const KWOKNodeName = "kwok-node-0"

// kwokNodeAnnotation marks the nodes KWOK manages.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// kubeletArgs are the apiserver flags that let it reach the kubelet endpoint KWOK serves for its nodes
// (pods/log, exec): by the node's InternalIP, verifying KWOK's certificate with the environment's CA.
func kubeletArgs(ca *CA) []string {
	return []string{
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + ca.CertFile,
	}
}

// startWorkloads gives a cluster the control loops that turn a Deployment into running Pods: kube-controller-
// manager's deployment and replicaset controllers (with the garbage collector and the namespace controller),
// kube-scheduler, and KWOK, which simulates one node: it marks the Pods bound to it Running and Ready and
// serves their logs (every container's log is the file podLogFile) at the node's kubelet endpoint.
// No container runs: the Pods are real API objects whose status and logs KWOK provides.
func (c *Cluster) startWorkloads(ctx context.Context, ca *CA) error {
	if err := c.startControllerManager(ctx, "garbagecollector,namespace,deployment,replicaset"); err != nil {
		return err
	}
	scheduler, err := Binary("kube-scheduler")
	if err != nil {
		return err
	}
	kwok, err := Binary("kwok")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "kwok")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create kwok dir: %w", err)
	}
	logFile := filepath.Join(dir, "pod.log")
	if err := writePodLog(logFile, c.Name); err != nil {
		return err
	}
	config := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(config, []byte(kwokConfig(logFile)), 0o600); err != nil {
		return fmt.Errorf("write kwok config: %w", err)
	}
	cert, key, err := ca.Issue("kubelet-"+c.Name, true)
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	sched, err := StartProcess(ProcessSpec{
		Name: "kube-scheduler-" + c.Name, Path: scheduler,
		Args: []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1",
			"--secure-port=0", "--v=0"},
		LogPath: filepath.Join(c.Dir, "logs", "kube-scheduler.log"),
	})
	if err != nil {
		return err
	}
	c.extra = append(c.extra, sched)
	kw, err := StartProcess(ProcessSpec{
		Name: "kwok-" + c.Name, Path: kwok,
		Args: []string{"--kubeconfig=" + c.Kubeconfig, "--config=" + config,
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			"--node-ip=127.0.0.1", "--node-port=" + strconv.Itoa(port),
			"--server-address=127.0.0.1:" + strconv.Itoa(port),
			"--tls-cert-file=" + cert, "--tls-private-key-file=" + key},
		// KWOK reads its default configuration from $HOME/.kwok.
		Env:     []string{"HOME=" + dir},
		LogPath: filepath.Join(c.Dir, "logs", "kwok.log"),
	})
	if err != nil {
		return err
	}
	c.extra = append(c.extra, kw)
	if err := c.createKWOKNode(ctx); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	return kw.WaitReady(ctx, func(ctx context.Context) error {
		node, err := kube.CoreV1().Nodes().Get(ctx, KWOKNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
		}
		if !ready {
			return fmt.Errorf("node %s of %s not ready yet", KWOKNodeName, c.Name)
		}
		// The apiserver taints a new node not-ready; kube-controller-manager's node lifecycle controller, which
		// does not run here (it would also evict Pods whenever KWOK's heartbeat is late), lifts the taint once
		// the node is Ready. Do that once.
		if len(node.Spec.Taints) == 0 {
			return nil
		}
		_, err = kube.CoreV1().Nodes().Patch(ctx, KWOKNodeName, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("remove the not-ready taint of node %s of %s: %w", KWOKNodeName, c.Name, err)
		}
		return nil
	})
}

// createKWOKNode registers the node KWOK simulates, with room for many Pods.
func (c *Cluster) createKWOKNode(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        KWOKNodeName,
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{"kubernetes.io/hostname": KWOKNodeName, "kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "type": "kwok"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s on %s: %w", KWOKNodeName, c.Name, err)
	}
	return nil
}

// kwokConfig maps every container of every Pod to one log file (KWOK's ClusterLogs).
func kwokConfig(logFile string) string {
	return `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: every-pod
spec:
  logs:
  - logsFile: ` + strconv.Quote(logFile) + `
    follow: false
`
}

// PodLogMarker is in every log line KWOK serves for a Pod of a test cluster.
const PodLogMarker = "simulated by KWOK"

// writePodLog writes the container log KWOK serves for every Pod, in the CRI log format the kubelet reads.
func writePodLog(path, cluster string) error {
	start := time.Now().UTC().Add(-time.Minute)
	var b strings.Builder
	lines := []string{
		"container started on " + KWOKNodeName + " of cluster " + cluster + " (" + PodLogMarker + ": no process runs)",
		"listening on :80 (" + PodLogMarker + ")",
		"GET / 200 (" + PodLogMarker + ")",
	}
	for i, line := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", start.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), line)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write pod log: %w", err)
	}
	return nil
}
