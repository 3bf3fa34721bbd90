package loopback

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestWorkloads: on a managed cluster with Workloads, a Deployment gets a ReplicaSet (deployment controller),
// a Pod (replicaset controller) bound to the KWOK node (scheduler), Running and Ready (KWOK), and the Pod's log
// comes back through the apiserver's pods/log, which dials KWOK's kubelet endpoint.
func TestWorkloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{ManagedClusters: []string{"c1"}, Workloads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			env.KeepDir()
			t.Logf("logs kept in %s", env.Dir)
		}
		env.Stop()
	}()
	kube := kubernetes.NewForConfigOrDie(env.Cluster("c1").Config())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "guestbook"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "guestbook-ui"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "guestbook-ui", Namespace: "guestbook"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "guestbook-ui", Image: "gcr.io/heptio-images/ks-guestbook-demo:0.2",
					Ports: []corev1.ContainerPort{{ContainerPort: 80}},
				}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments("guestbook").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var pods []corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := kube.AppsV1().Deployments("guestbook").Get(ctx, "guestbook-ui", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := kube.AppsV1().ReplicaSets("guestbook").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		list, err := kube.CoreV1().Pods("guestbook").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = list.Items
		if d.Status.AvailableReplicas == 2 && len(rs.Items) == 1 && ownedBy(rs.Items[0].OwnerReferences, "Deployment", "guestbook-ui") &&
			len(pods) == 2 && allRunningReady(pods, rs.Items[0].Name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment not available: status=%+v replicasets=%d pods=%s", d.Status, len(rs.Items), podStates(pods))
		}
		time.Sleep(200 * time.Millisecond)
	}

	logs, err := kube.CoreV1().Pods("guestbook").GetLogs(pods[0].Name, &corev1.PodLogOptions{Container: "guestbook-ui"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(logs)), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], PodLogMarker) || !strings.Contains(lines[0], "cluster c1") {
		t.Fatalf("pod log:\n%s", logs)
	}
	tail, err := kube.CoreV1().Pods("guestbook").GetLogs(pods[1].Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](1)}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(tail)); got != lines[len(lines)-1] {
		t.Fatalf("tail of one line: %q, want %q", got, lines[len(lines)-1])
	}
}

func ownedBy(refs []metav1.OwnerReference, kind, name string) bool {
	for _, r := range refs {
		if r.Kind == kind && r.Name == name && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// allRunningReady reports whether every Pod belongs to the ReplicaSet, is bound to the KWOK node, Running and Ready.
func allRunningReady(pods []corev1.Pod, replicaSet string) bool {
	for _, p := range pods {
		if !ownedBy(p.OwnerReferences, "ReplicaSet", replicaSet) || p.Spec.NodeName != KWOKNodeName || p.Status.Phase != corev1.PodRunning {
			return false
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			return false
		}
	}
	return true
}

func podStates(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		b.WriteString(p.Name + ":" + p.Spec.NodeName + ":" + string(p.Status.Phase))
		for _, c := range p.Status.Conditions {
			b.WriteString(":" + string(c.Type) + "=" + string(c.Status) + "(" + c.Message + ")")
		}
		b.WriteString(" ")
	}
	return b.String()
}
