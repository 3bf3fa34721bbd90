package charts

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/agent"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/server"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// valuesSet is a values file of testdata rendered with one of the charts.
type valuesSet struct {
	chart, values string
	// hub: applied to the hub (the hub chart), else to the managed cluster (the agent chart).
	hub bool
}

// name is the set's release name, and the namespace it is applied in.
func (s valuesSet) name() string { return strings.TrimSuffix(s.values, ".yaml") }

var valuesSets = []valuesSet{
	{hubChart, "hub-defaults.yaml", true},
	{hubChart, "hub-kube.yaml", true},
	{hubChart, "hub-grpc-postgres-tls.yaml", true},
	{hubChart, "hub-grpc-maestro.yaml", true},
	{hubChart, "hub-grpc-trial.yaml", true},
	{hubChart, "hub-server-external-db.yaml", true},
	{hubChart, "hub-grpc-console.yaml", true},
	{agentChart, "agent-kube.yaml", false},
	{agentChart, "agent-grpc-token.yaml", false},
	{agentChart, "agent-grpc-cert.yaml", false},
	{agentChart, "agent-kube-console.yaml", false},
}

// serviceMonitorCRD is where the Prometheus Operator's ServiceMonitor CRD is read from (the Go module cache),
// so that the charts' ServiceMonitors are checked against its schema.
const (
	prometheusOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	prometheusOperatorVersion = "v0.85.0"
	serviceMonitorCRD         = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
)

// TestLint: helm lint --strict passes for every values set.
func TestLint(t *testing.T) {
	for _, s := range valuesSets {
		t.Run(s.name(), func(t *testing.T) {
			out, err := helm(t, "lint", "--strict", s.chart, "--namespace", s.name(), "--values", "testdata/"+s.values)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// TestRenderedManifests renders every values set with helm template and applies the result server-side to a
// real kube-apiserver (which rejects unknown fields and invalid objects) in a namespace that enforces the
// restricted Pod Security Standard, where each workload's pod template must be admitted as a Pod (dry run).
// Every argocd-pull container's arguments must parse and validate with the subcommand's own flags, its probes
// must hit the endpoints that subcommand serves, and its root file system must be read-only.
func TestRenderedManifests(t *testing.T) {
	ctx := context.Background()
	ensureServiceMonitorCRD(t)
	for _, s := range valuesSets {
		t.Run(s.name(), func(t *testing.T) {
			cluster := env.Cluster("cluster1")
			if s.hub {
				cluster = env.Hub
			}
			c := testutil.Client(t, cluster.Config(), scheme.Scheme)
			ns := s.name()
			objs := template(t, s.chart, s.values, s.name(), ns)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			createObjects(t, c, restrictedNamespace(ns))
			for _, o := range objs {
				// The console's objects in Argo CD's namespace (its Secrets' Role, argocd-redis's policy).
				if other := o.GetNamespace(); other != "" && other != ns {
					createObjects(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})
				}
			}
			for _, o := range objs {
				if o.GetLabels()["app.kubernetes.io/instance"] != s.name() || o.GetLabels()["app.kubernetes.io/part-of"] != "argocd-pull" {
					t.Errorf("%s %s lacks the release's labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
				}
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("chart-test"), client.ForceOwnership); err != nil {
					t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
			for _, o := range objs {
				spec, kind := podSpecOf(t, o)
				if spec == nil {
					continue
				}
				checkPodSpec(t, kind+" "+o.GetName(), spec)
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.GetName() + "-0"}, Spec: *spec}
				if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
					t.Errorf("the pod of %s %s is not admitted: %v", kind, o.GetName(), err)
				}
			}
		})
	}
}

// podSpecOf returns the pod spec of a Deployment or StatefulSet, with the volumes the StatefulSet controller
// adds for its claim templates, or nil for other kinds.
func podSpecOf(t *testing.T, o *unstructured.Unstructured) (*corev1.PodSpec, string) {
	t.Helper()
	switch o.GetKind() {
	case "Deployment":
		d := &appsv1.Deployment{}
		fromUnstructured(t, o, d)
		return &d.Spec.Template.Spec, "Deployment"
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		fromUnstructured(t, o, s)
		spec := s.Spec.Template.Spec
		for _, claim := range s.Spec.VolumeClaimTemplates {
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + s.Name + "-0"}}})
		}
		return &spec, "StatefulSet"
	}
	return nil, ""
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("decode %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// checkPodSpec checks what the restricted Pod Security Standard does not: a read-only root file system, and for
// argocd-pull's containers, arguments the subcommand accepts and probes on the endpoints it serves.
func checkPodSpec(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: the pod does not require a non-root user", what)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s, container %s: the root file system is writable", what, c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s, container %s: no memory request or limit", what, c.Name)
		}
		if !strings.Contains(c.Image, "argocd-pull") {
			continue
		}
		if err := validateArgs(t, c); err != nil {
			t.Errorf("%s, container %s: argocd-pull %s: %v", what, c.Name, strings.Join(c.Args, " "), err)
		}
		checkProbes(t, what, c)
	}
}

// checkProbes: liveness on /healthz and readiness on /readyz (the agent has /healthz only), on declared ports.
func checkProbes(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	readiness := "/readyz"
	if c.Args[0] == "agent" {
		readiness = "/healthz"
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, readiness}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s, container %s: no HTTP probe for %s", what, c.Name, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s, container %s: a probe gets %s, want %s", what, c.Name, p.probe.HTTPGet.Path, p.path)
		}
		if _, ok := containerPort(c, p.probe.HTTPGet.Port.String()); !ok {
			t.Errorf("%s, container %s: the probe's port %s is not a container port", what, c.Name, p.probe.HTTPGet.Port.String())
		}
	}
}

// containerPort resolves a port name or number of a container.
func containerPort(c corev1.Container, port string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// runnable is what each subcommand's options type provides (as cmd/argocd-pull wires it).
type runnable interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
}

// validateArgs parses a container's arguments with the flags of the argocd-pull subcommand they name (and
// klog's, which every subcommand has) and validates them. The server's ARGOCD_PULL_SERVER_* variables come from
// Secrets and the pod at run time; here they only have to be set.
func validateArgs(t *testing.T, c corev1.Container) error {
	t.Helper()
	if len(c.Command) != 0 {
		return fmt.Errorf("the container overrides the image's entrypoint with %v", c.Command)
	}
	if len(c.Args) == 0 {
		return errors.New("no subcommand")
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, server.EnvPrefix) {
			t.Setenv(e.Name, "from-"+e.Name)
		}
	}
	var opts runnable
	switch c.Args[0] {
	case "controller":
		opts = hubmanager.NewOptions()
	case "server":
		opts = server.NewOptions()
	case "agent":
		opts = agent.NewOptions()
	default:
		return fmt.Errorf("unknown subcommand %q", c.Args[0])
	}
	fs := pflag.NewFlagSet(c.Args[0], pflag.ContinueOnError)
	opts.AddFlags(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	// -v sets this process's klog verbosity too; put it back.
	defer func() { _ = klogFlags.Set("v", "0") }()
	if err := fs.Parse(c.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return opts.Validate()
}
