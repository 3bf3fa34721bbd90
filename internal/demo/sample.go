package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/statuscmd"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// The ApplicationSets the demo runs, for the pull model and for the CMP variant; REPO_URL is replaced with the
// fleet's git repository.
const (
	sampleAppSet    = "config/samples/guestbook-applicationset.yaml"
	sampleCMPAppSet = "config/samples/guestbook-cmp-applicationset.yaml"
)

// Guestbook is the content of the sample git repository: Argo CD's familiar guestbook-ui Deployment and Service.
// On the demo's managed clusters the Deployment gets a ReplicaSet and a Pod that KWOK runs (Running, Ready, with
// a log), so Argo CD's health of the Deployment means what it means on a real cluster.
var Guestbook = map[string]string{
	"guestbook/guestbook-ui-deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: guestbook-ui
spec:
  replicas: 1
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      app: guestbook-ui
  template:
    metadata:
      labels:
        app: guestbook-ui
    spec:
      containers:
      - image: gcr.io/heptio-images/ks-guestbook-demo:0.2
        name: guestbook-ui
        ports:
        - containerPort: 80
`,
	"guestbook/guestbook-ui-svc.yaml": `apiVersion: v1
kind: Service
metadata:
  name: guestbook-ui
spec:
  ports:
  - port: 80
    targetPort: 80
  selector:
    app: guestbook-ui
`,
}

// runSample pushes the sample repository, applies the sample ApplicationSet on the hub and shows the
// Applications it generates until every one is Synced and Healthy.
func (o *Options) runSample(ctx context.Context, f *localfleet.System) error {
	o.printf("==> pushing the guestbook repository to the git server (%s)\n", f.Git.URL("guestbook"))
	if err := f.Git.Commit(ctx, "guestbook", "guestbook", Guestbook); err != nil {
		return err
	}
	sample := sampleAppSet
	if o.CMP {
		sample = sampleCMPAppSet
	}
	appset, err := loadAppSet(sample, f.Git.URL("guestbook"))
	if err != nil {
		return err
	}
	hub, err := client.NewWithWatch(f.Env.Hub.Config(), client.Options{Scheme: hubmanager.Scheme()})
	if err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	o.printf("==> applying the ApplicationSet %s/%s on the hub (%s)\n", appset.GetNamespace(), appset.GetName(), sample)
	if err := hub.Create(ctx, appset); err != nil {
		return fmt.Errorf("create applicationset: %w", err)
	}
	// Pull-model Applications carry the pull label; the CMP variant's are the hub's own Argo CD Applications.
	selector := client.MatchingLabels{argocd.LabelPull: "true"}
	if o.CMP {
		o.printf("==> Applications on the hub, their health from the managed clusters' ManifestWork status:\n")
		selector = client.MatchingLabels{}
	} else {
		o.printf("==> Applications on the hub, as the managed clusters report them:\n")
	}
	return o.watchUntilHealthy(ctx, hub, selector, len(f.Clusters))
}

func loadAppSet(sample, repoURL string) (*unstructured.Unstructured, error) {
	root, err := loopback.ModuleRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, sample)) //nolint:gosec // the repository's sample
	if err != nil {
		return nil, fmt.Errorf("read sample applicationset: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(string(data), "REPO_URL", repoURL)), &u.Object); err != nil {
		return nil, fmt.Errorf("decode sample applicationset: %w", err)
	}
	return u, nil
}

// watchUntilHealthy prints the table of the selected Applications each time it changes, until there are want
// Applications and all are Synced and Healthy.
func (o *Options) watchUntilHealthy(ctx context.Context, hub client.WithWatch, selector client.MatchingLabels, want int) error {
	for {
		list := argocd.NewApplicationList()
		if err := hub.List(ctx, list, client.InNamespace(localfleet.ArgoCDNamespace), selector); err != nil {
			return fmt.Errorf("list applications: %w", err)
		}
		apps := map[string]*unstructured.Unstructured{}
		for i := range list.Items {
			apps[list.Items[i].GetName()] = &list.Items[i]
		}
		w, err := hub.Watch(ctx, argocd.NewApplicationList(), client.InNamespace(localfleet.ArgoCDNamespace), selector)
		if err != nil {
			return fmt.Errorf("watch applications: %w", err)
		}
		done, err := o.follow(ctx, w, apps, want)
		w.Stop()
		if done || err != nil {
			return err
		}
	}
}

// follow consumes a watch; it returns true when every Application is Synced and Healthy, false when the
// watch ended and must be started again. The table is printed when it changed, at most once a second, and
// once more at the end.
func (o *Options) follow(ctx context.Context, w watch.Interface, apps map[string]*unstructured.Unstructured, want int) (bool, error) {
	last, pending := "", false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	show := func(force bool) bool {
		table, healthy := render(apps)
		done := healthy && len(apps) >= want
		switch {
		case table == last:
			pending = false
		case force || done:
			o.printf("%s\n%s\n", time.Now().Format("15:04:05"), table)
			last, pending = table, false
		default:
			pending = true
		}
		return done
	}
	if show(true) {
		return true, nil
	}
	for {
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("not every Application was Synced and Healthy in time: %w", ctx.Err())
		case <-tick.C:
			if pending {
				show(true)
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			app, isApp := ev.Object.(*unstructured.Unstructured)
			if !isApp {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(apps, app.GetName())
			} else {
				apps[app.GetName()] = app
			}
			if show(false) {
				return true, nil
			}
		}
	}
}

// render returns the status command's tables of the Applications and whether all are Synced and Healthy.
func render(apps map[string]*unstructured.Unstructured) (string, bool) {
	observed := make([]appsetreport.Observed, 0, len(apps))
	healthy := len(apps) > 0
	for _, u := range apps {
		app, err := argocd.ApplicationFromUnstructured(u)
		if err != nil {
			return fmt.Sprintf("application %s: %v", u.GetName(), err), false
		}
		o := appsetreport.Observe(app)
		healthy = healthy && o.Sync == appsetreport.SyncSynced && o.Health == appsetreport.HealthHealthy
		observed = append(observed, o)
	}
	var b strings.Builder
	if err := statuscmd.Table(&b, observed); err != nil {
		return err.Error(), false
	}
	return b.String(), healthy
}

// printInstructions says how to look at the running fleet and how to stop it.
func (o *Options) printInstructions(f *localfleet.System) {
	self, _ := os.Executable()
	kubectl, err := loopback.Binary("kubectl")
	if err != nil {
		kubectl = "kubectl"
	}
	o.printf("%s State, kubeconfigs and logs are in %s.\n\n", readyMarker, o.Dir)
	if f.HubArgoCD != nil {
		o.printf("The hub's Argo CD web UI: %s (user admin, password %s)\n", f.HubArgoCD.URL, f.HubArgoCD.AdminPassword)
		if f.Console.KubeProxy != "" {
			o.printf("  a pulled Application's tree, live state, diff, events and logs, read from its cluster through the console:\n")
			o.printf("  %s/applications/%s/%s-guestbook?view=tree\n", f.HubArgoCD.URL, localfleet.ArgoCDNamespace, f.Clusters[0])
		}
		argocd, err := loopback.Binary("argocd")
		if err != nil {
			argocd = "argocd"
		}
		o.printf("  %s login %s --username admin --password %s --plaintext\n\n",
			argocd, strings.TrimPrefix(f.HubArgoCD.URL, "http://"), f.HubArgoCD.AdminPassword)
	}
	o.printf("Look at it from the hub:\n")
	o.printf("  %s --kubeconfig %s get applications -A\n", kubectl, f.Env.Hub.Kubeconfig)
	o.printf("  %s status --kubeconfig %s\n", self, f.Env.Hub.Kubeconfig)
	o.printf("  %s --kubeconfig %s get applicationsets,gitopsclusters,placementdecisions -n argocd\n", kubectl, f.Env.Hub.Kubeconfig)
	if f.CMP {
		o.printf("  %s --kubeconfig %s get manifestworks -n %s -o yaml   # the work, its status and feedback\n", kubectl, f.Env.Hub.Kubeconfig, f.Clusters[0])
		o.printf("and on a managed cluster (no Argo CD there):\n")
	} else {
		o.printf("and on a managed cluster:\n")
		o.printf("  %s --kubeconfig %s get applications -n argocd\n", kubectl, f.Env.Cluster(f.Clusters[0]).Kubeconfig)
	}
	o.printf("  %s --kubeconfig %s get deployments,replicasets,pods,services -n guestbook\n", kubectl, f.Env.Cluster(f.Clusters[0]).Kubeconfig)
	o.printf("  %s --kubeconfig %s logs -n guestbook deployment/guestbook-ui\n", kubectl, f.Env.Cluster(f.Clusters[0]).Kubeconfig)
	if f.Transport == workclient.TransportGRPC {
		o.printf("argocd-pull server (Maestro-compatible REST API and metrics, admin token in %s):\n", filepath.Join(o.Dir, "pki", "admin.token"))
		o.printf("  curl -s --cacert %s https://%s/metrics | grep ^argocd_pull\n", filepath.Join(o.Dir, "pki", "ca.crt"), f.Server.HTTP)
		o.printf("  curl -s --cacert %s -H \"Authorization: Bearer $(cat %s)\" https://%s/api/maestro/v1/consumers\n",
			filepath.Join(o.Dir, "pki", "ca.crt"), filepath.Join(o.Dir, "pki", "admin.token"), f.Server.HTTP)
	}
	o.printf("Hub controller metrics: curl -s http://%s/metrics\n", f.ControllerMetrics)
	o.printf("Logs of every process: %s\n\n", filepath.Join(o.Dir, "logs"))
	o.printf("Stop it with `make demo-down` (or Ctrl-C when it runs in the foreground).\n")
}
