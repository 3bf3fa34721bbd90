package charts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// agentNamespace is where the agent chart is installed on the managed cluster, as docs/install.md does.
const agentNamespace = "open-cluster-management-agent"

// TestHubChartBasicMode installs the hub chart with its default values (the basic mode) into the hub with the
// Helm library, and the agent chart (driver kube) into the managed cluster, then runs their rendered containers:
// the controller becomes ready and leads with its chart's ServiceAccount and RBAC, the agent reads its cluster's
// ManifestWorks with a credential bound to the chart's agent ClusterRole in that cluster's namespace only, and a
// pull-model Application goes to the managed cluster and its status comes back.
func TestHubChartBasicMode(t *testing.T) {
	ctx := context.Background()
	const ns = "argocd-pull"
	hub, spoke := hubClient(t), spokeClient(t)
	prepareFleet(t, hub, spoke)

	rel := helmInstall(t, env.Hub, hubChart, "argocd-pull", ns, "hub-defaults.yaml")
	for _, crd := range []string{"gitopsclusters.apps.open-cluster-management.io", "multiclusterapplicationsetreports.apps.open-cluster-management.io"} {
		if err := hub.Get(ctx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("Helm did not create CRD %s from the chart's crds/: %v", crd, err)
		}
	}
	if !strings.Contains(rel.Info.Notes, "create rolebinding argocd-pull-agent --clusterrole=argocd-pull-agent") {
		t.Errorf("NOTES.txt does not say how to bind an agent's credential:\n%s", rel.Info.Notes)
	}

	hubKubelet := newKubelet(t, env.Hub)
	controller := hubKubelet.runDeployment(t, ns, "argocd-pull-controller")
	controller.waitReady(t, 2*time.Minute)
	testutil.EventuallyWithin(t, time.Minute, "the controller leads", func() error {
		lease := &coordinationv1.Lease{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "argocd-pull-controller"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease without holder")
		}
		return nil
	})

	// The agent's credential on the hub, as NOTES.txt says: a ServiceAccount in the cluster's namespace bound to
	// the chart's agent ClusterRole there; its kubeconfig in a Secret on the managed cluster.
	createObjects(t, hub,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "argocd-pull-agent"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "argocd-pull-agent"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "argocd-pull-agent"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "cluster1", Name: "argocd-pull-agent"}}})
	kubeconfig, err := os.ReadFile(newKubelet(t, env.Hub).serviceAccountKubeconfig(t, "cluster1", "argocd-pull-agent", t.TempDir())) //nolint:gosec // the test's file
	if err != nil {
		t.Fatal(err)
	}
	createObjects(t, spoke, restrictedNamespace(agentNamespace),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "hub-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kubeconfig}})
	helmInstall(t, env.Cluster("cluster1"), agentChart, "argocd-pull-agent", agentNamespace, "agent-kube.yaml")
	agentPod := newKubelet(t, env.Cluster("cluster1")).runDeployment(t, agentNamespace, "argocd-pull-agent")
	agentPod.waitReady(t, 2*time.Minute)

	deliverAndReport(t, hub, spoke, "guestbook-basic")
	for _, p := range []*pod{controller, agentPod} {
		if p.logHas(t, "forbidden") {
			t.Errorf("pod %s was refused by RBAC; log: %s", p.name, p.proc.LogPath)
		}
	}
}

// TestHubChartMaestroMode installs the hub chart in the Maestro mode (hub-grpc-postgres-tls.yaml: transport
// grpc, this release's server on the bundled PostgreSQL, TLS, bearer tokens and a client CA) and the agent chart
// with driver grpc and a client certificate (agent-grpc-cert.yaml), then runs the server, the controller and the
// agent from their rendered containers: each becomes ready, and a pull-model Application goes through the server
// to the managed cluster and its status comes back. The bundled PostgreSQL's container is not run: the test's
// PostgreSQL stands in for it, with the role and database its image would create from the chart's Secret.
func TestHubChartMaestroMode(t *testing.T) {
	ctx := context.Background()
	const ns, release = "argocd-pull-maestro", "maestro"
	hub, spoke := hubClient(t), spokeClient(t)
	prepareFleet(t, hub, spoke)
	ensureServiceMonitorCRD(t)

	ca, err := loopback.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := ca.Issue("maestro-argocd-pull-server", true)
	if err != nil {
		t.Fatal(err)
	}
	sourceToken, adminToken := loopback.RandomToken(), loopback.RandomToken()
	createObjects(t, hub, restrictedNamespace(ns),
		tlsSecret(t, ns, "argocd-pull-server-tls", serverCert, serverKey, ca.CertFile),
		fileSecret(t, ns, "argocd-pull-client-ca", "ca.crt", ca.CertFile),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-pull-server-tokens"},
			StringData: map[string]string{"tokens.csv": sourceToken + ",source,argocd-pull\n" + adminToken + ",admin\n"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd-pull-controller-token"},
			StringData: map[string]string{"token": sourceToken}})
	rel := helmInstall(t, env.Hub, hubChart, release, ns, "hub-grpc-postgres-tls.yaml")
	if !strings.Contains(rel.Info.Notes, "argocd-pull server consumers create --name cluster1") {
		t.Errorf("NOTES.txt does not say how to register a consumer:\n%s", rel.Info.Notes)
	}

	k := newKubelet(t, env.Hub)
	startBundledPostgres(t, k, ns, release+"-argocd-pull")
	server := k.runDeployment(t, ns, release+"-argocd-pull-server")
	server.waitReady(t, 2*time.Minute)
	k.addService(t, ns, release+"-argocd-pull-server", server)
	k.addService(t, ns, release+"-argocd-pull-server-agents", server)

	admin, err := restapi.New(restapi.Config{URL: "https://" + k.services[release+"-argocd-pull-server."+ns+".svc:8000"],
		Token: adminToken, TLS: restapi.TLS{CAFile: ca.CertFile}})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.EnsureConsumer(ctx, "cluster1"); err != nil {
		t.Fatal(err)
	}
	controller := k.runDeployment(t, ns, release+"-argocd-pull-controller")
	controller.waitReady(t, 2*time.Minute)

	// The agent dials the agent Service's load balancer by its public name (agent-grpc-cert.yaml), which
	// reaches the server's agent port.
	lb := k.services[release+"-argocd-pull-server-agents."+ns+".svc:8091"]
	agentCert, agentKey, err := ca.Issue("agent:cluster1", false)
	if err != nil {
		t.Fatal(err)
	}
	const agentNS = agentNamespace + "-grpc"
	createObjects(t, spoke, restrictedNamespace(agentNS),
		tlsSecret(t, agentNS, "argocd-pull-agent-cert", agentCert, agentKey, ""),
		fileSecret(t, agentNS, "argocd-pull-server-ca", "ca.crt", ca.CertFile))
	helmInstall(t, env.Cluster("cluster1"), agentChart, "argocd-pull-agent-grpc", agentNS, "agent-grpc-cert.yaml")
	spokeKubelet := newKubelet(t, env.Cluster("cluster1"))
	spokeKubelet.route("argocd-pull-server-agents.example.com:8091", lb)
	agentPod := spokeKubelet.runDeployment(t, agentNS, "argocd-pull-agent-grpc")
	agentPod.waitReady(t, 2*time.Minute)

	deliverAndReport(t, hub, spoke, "guestbook-maestro")
	for _, p := range []*pod{server, controller, agentPod} {
		for _, refused := range []string{"forbidden", "Unauthenticated", "PermissionDenied"} {
			if p.logHas(t, refused) {
				t.Errorf("pod %s was refused (%s); log: %s", p.name, refused, p.proc.LogPath)
			}
		}
	}
}

// helmInstall installs a chart with a values file of testdata into a cluster with the Helm library, as
// `helm install RELEASE CHART -n NS --create-namespace -f VALUES` does, without waiting for pods (no kubelet
// runs them).
func helmInstall(t *testing.T, c *loopback.Cluster, chart, name, ns, values string) *release.Release {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &c.Kubeconfig, &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	cfg.Capabilities = capabilities(t, flags)
	chrt, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValuesFile(filepath.Join("testdata", values))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = name, ns, true
	install.Timeout = 2 * time.Minute
	rel, err := install.Run(chrt, vals)
	if err != nil {
		t.Fatalf("helm install %s %s with %s: %v", name, chart, values, err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release %s is %s", name, rel.Info.Status)
	}
	return rel
}

// capabilities are what Helm discovers of a cluster (its API versions and its version), with one correction:
// the loopback kube-apiserver is built without version stamping and reports v0.0.0-master, which no chart's
// kubeVersion admits, so its version is the one hack/kubernetes builds it from.
func capabilities(t *testing.T, flags *genericclioptions.ConfigFlags) *chartutil.Capabilities {
	t.Helper()
	dc, err := flags.ToDiscoveryClient()
	if err != nil {
		t.Fatal(err)
	}
	apiVersions, err := action.GetVersionSet(dc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	version := v.GitVersion
	if strings.HasPrefix(version, "v0.0.0") {
		goMod := string(readFile(t, "../../hack/kubernetes/go.mod"))
		m := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v1\.([0-9]+)\.[0-9]+)$`).FindStringSubmatch(goMod)
		if m == nil {
			t.Fatal("no k8s.io/kubernetes version in hack/kubernetes/go.mod")
		}
		version, v.Major, v.Minor = m[1], "1", m[2]
	}
	return &chartutil.Capabilities{APIVersions: apiVersions, HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
		KubeVersion: chartutil.KubeVersion{Version: version, Major: v.Major, Minor: v.Minor}}
}

// startBundledPostgres stands in for the chart's PostgreSQL container: the test's PostgreSQL gets the role and
// database that the image creates from POSTGRES_USER, POSTGRES_PASSWORD (the chart's Secret) and POSTGRES_DB, and
// the chart's Service routes to it.
func startBundledPostgres(t *testing.T, k *kubelet, ns, fullname string) {
	t.Helper()
	ctx := context.Background()
	secret, err := k.kube.CoreV1().Secrets(ns).Get(ctx, fullname+"-database", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secret.Data["password"]) < 32 || !strings.Contains(string(secret.Data["url"]), string(secret.Data["password"])) {
		t.Fatalf("the chart's database Secret has no generated password in its URL: %v", secret.Data)
	}
	conn, err := pgx.Connect(ctx, env.Postgres.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, stmt := range []string{
		"CREATE ROLE argocd_pull LOGIN PASSWORD " + quoteLiteral(string(secret.Data["password"])),
		"CREATE DATABASE argocd_pull OWNER argocd_pull",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", strings.SplitN(stmt, " PASSWORD", 2)[0], err)
		}
	}
	k.route(fmt.Sprintf("%s-postgresql.%s.svc:5432", fullname, ns), fmt.Sprintf("127.0.0.1:%d", env.Postgres.Port))
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// deliverAndReport creates a pull-model Application on the hub for cluster1 and waits until it is on the
// managed cluster, then writes the status its Argo CD would and waits until the hub shows it. The Application is
// deleted, from both, at the end of the test.
func deliverAndReport(t *testing.T, hub, spoke client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	app := argocd.NewApplication()
	app.SetNamespace("argocd")
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: "cluster1", argocd.AnnotationSkipReconcile: "true"})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{"name": "cluster1", "namespace": "guestbook"},
	}
	if err := hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteApplication(t, hub, spoke, name) })
	key := client.ObjectKey{Namespace: "argocd", Name: name}
	testutil.EventuallyWithin(t, time.Minute, "the application on the managed cluster", func() error {
		return spoke.Get(ctx, key, argocd.NewApplication())
	})
	testutil.EventuallyWithin(t, 30*time.Second, "write the managed cluster's status", func() error {
		got := argocd.NewApplication()
		if err := spoke.Get(ctx, key, got); err != nil {
			return err
		}
		got.Object["status"] = map[string]any{"sync": map[string]any{"status": "Synced", "revision": "0123abc"}, "health": map[string]any{"status": "Healthy"}}
		return spoke.Update(ctx, got)
	})
	testutil.EventuallyWithin(t, time.Minute, "the managed cluster's status on the hub", func() error {
		got := argocd.NewApplication()
		if err := hub.Get(ctx, key, got); err != nil {
			return err
		}
		sync, _, _ := unstructured.NestedString(got.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(got.Object, "status", "health", "status")
		if sync != "Synced" || health != "Healthy" {
			return fmt.Errorf("hub status %v", got.Object["status"])
		}
		return nil
	})
}

// deleteApplication deletes a hub Application while the controller and the agent still run (cleanups run in
// reverse order), so the next test's controller does not find it.
func deleteApplication(t *testing.T, hub, spoke client.Client, name string) {
	ctx := context.Background()
	app := argocd.NewApplication()
	app.SetNamespace("argocd")
	app.SetName(name)
	if err := hub.Delete(ctx, app); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	testutil.EventuallyWithin(t, time.Minute, "the application removed from the managed cluster and the hub", func() error {
		for _, c := range []client.Client{spoke, hub} {
			if err := c.Get(ctx, client.ObjectKey{Namespace: "argocd", Name: name}, argocd.NewApplication()); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
		}
		return nil
	})
}

// prepareFleet creates what an OCM hub with Argo CD has for cluster1: its ManagedCluster and namespace, Argo CD's
// namespace with the default AppProject, and a Placement of cluster1 with the decision OCM's placement controller
// would write; and Argo CD's namespace on cluster1.
func prepareFleet(t *testing.T, hub, spoke client.Client) {
	t.Helper()
	ctx := context.Background()
	if err := loopback.PrepareArgoCDNamespace(ctx, env.Hub, "argocd", 0); err != nil {
		t.Fatal(err)
	}
	createObjects(t, hub,
		&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "cluster1"}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster1"}},
		&clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "cluster1"}})
	decision := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "cluster1-decision-1",
		Labels: map[string]string{clusterv1beta1.PlacementLabel: "cluster1", clusterv1beta1.DecisionGroupIndexLabel: "0"}}}
	createObjects(t, hub, decision)
	if err := hub.Get(ctx, client.ObjectKeyFromObject(decision), decision); err != nil {
		t.Fatal(err)
	}
	decision.Status.Decisions = []clusterv1beta1.ClusterDecision{{ClusterName: "cluster1", Reason: "test"}}
	if err := hub.Status().Update(ctx, decision); err != nil {
		t.Fatal(err)
	}
	createObjects(t, spoke, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}})
}

// createObjects creates objects; one that exists already is fine.
func createObjects(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func restrictedNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
}

// tlsSecret is a kubernetes.io/tls Secret of a certificate and key, and a CA bundle when caFile is given.
func tlsSecret(t *testing.T, ns, name, certFile, keyFile, caFile string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: readFile(t, certFile), corev1.TLSPrivateKeyKey: readFile(t, keyFile)}}
	if caFile != "" {
		s.Data["ca.crt"] = readFile(t, caFile)
	}
	return s
}

func fileSecret(t *testing.T, ns, name, key, file string) *corev1.Secret {
	t.Helper()
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{key: readFile(t, file)}}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // the test's own files
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func hubClient(t *testing.T) client.Client {
	t.Helper()
	return testutil.Client(t, env.Hub.Config(), clientScheme(t))
}

func spokeClient(t *testing.T) client.Client {
	t.Helper()
	return testutil.Client(t, env.Cluster("cluster1").Config(), clientScheme(t))
}

// clientScheme is the hub controller's scheme and CRDs.
func clientScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := hubmanager.Scheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// ensureServiceMonitorCRD installs the Prometheus Operator's ServiceMonitor CRD (from the Go module cache) on
// the hub, for the values sets that enable the ServiceMonitors.
func ensureServiceMonitorCRD(t *testing.T) {
	t.Helper()
	dir, err := loopback.ModuleDir(prometheusOperatorModule, prometheusOperatorVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := loopback.InstallCRDs(context.Background(), env.Hub.Config(), []string{filepath.Join(dir, serviceMonitorCRD)}); err != nil {
		t.Fatal(err)
	}
}
