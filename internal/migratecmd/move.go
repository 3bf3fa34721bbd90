package migratecmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// AnnotationUIDs on a ManagedCluster holds, while its old works are retired, the uid of the Application on the
// managed cluster of each work (JSON, work name → uid), as both transports reported it when the cluster switched:
// the command checks after the retirement that each Application is still the same object.
const AnnotationUIDs = "argocd-pull.io/migration-uids"

// result is what a cluster's move did.
type result struct {
	works   int
	missing int
}

func (r result) note() string {
	if r.missing == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s deleted on the hub during the move)", count(r.missing, "Application"))
}

// errStop marks an error that waiting does not cure: the command stops at once.
var errStop = errors.New("stopped")

// move takes one cluster, step by step, to the target transport. Every step starts from the cluster's labels,
// so a move that was stopped continues where it was.
func (m *migration) move(ctx context.Context, cluster string) (result, error) {
	var res result
	for {
		mc := &clusterv1.ManagedCluster{}
		if err := m.hub.Get(ctx, client.ObjectKey{Name: cluster}, mc); err != nil {
			return res, fmt.Errorf("get managedcluster: %w", err)
		}
		mv, err := workclient.MoveOf(mc.Labels, m.From)
		if err != nil {
			return res, err
		}
		switch next(mv, m.To) {
		case stepDone:
			return res, nil
		case stepStartCopy:
			m.bar.step(cluster, "copying its works to %s", m.To)
			err = m.patch(ctx, cluster, map[string]any{workclient.LabelTransport: mv.Home, workclient.LabelCopyTo: m.To}, nil)
		case stepSwitch:
			var uids map[string]string
			if uids, err = m.waitCopied(ctx, cluster, mv.Home, m.To); err == nil {
				data, _ := json.Marshal(uids)
				err = m.patch(ctx, cluster,
					map[string]any{workclient.LabelTransport: m.To, workclient.LabelCopyTo: nil, workclient.LabelRetire: mv.Home},
					map[string]any{AnnotationUIDs: string(data)})
			}
		case stepFinish:
			if err = m.waitRetired(ctx, cluster, mv.Retire); err == nil {
				if res, err = m.verify(ctx, cluster, mc.Annotations[AnnotationUIDs]); err == nil {
					err = m.patch(ctx, cluster, map[string]any{workclient.LabelRetire: nil}, map[string]any{AnnotationUIDs: nil})
				}
			}
		case stepCancelCopy:
			m.bar.step(cluster, "removing the copies of an earlier move to %s", mv.CopyTo)
			err = m.patch(ctx, cluster, map[string]any{workclient.LabelCopyTo: nil, workclient.LabelRetire: mv.CopyTo}, nil)
		case stepClearRetire:
			if err = m.waitRetired(ctx, cluster, mv.Retire); err == nil {
				err = m.patch(ctx, cluster, map[string]any{workclient.LabelRetire: nil}, map[string]any{AnnotationUIDs: nil})
			}
		}
		if err != nil {
			return res, err
		}
	}
}

// patch merges labels and annotations (nil removes one) into a ManagedCluster.
func (m *migration) patch(ctx context.Context, cluster string, labels, annotations map[string]any) error {
	meta := map[string]any{"labels": labels}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode patch: %w", err)
	}
	mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	if err := m.hub.Patch(ctx, mc, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("label managedcluster %s: %w", cluster, err)
	}
	return nil
}

// wait polls check until it reports done, fails with errStop, or the cluster timeout passes; the error then
// says what was still pending.
func (m *migration) wait(ctx context.Context, what string, check func(ctx context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, m.ClusterTimeout)
	defer cancel()
	for {
		ok, pending, err := check(ctx)
		if errors.Is(err, errStop) {
			return err
		}
		if ok {
			return nil
		}
		if err != nil {
			pending = err.Error()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s did not happen within %s (--cluster-timeout): %s", what, m.ClusterTimeout, pending)
			}
			return ctx.Err()
		case <-time.After(m.PollInterval):
		}
	}
}

// works returns a cluster's pull-model works in a transport: the ManifestWorks in its hub namespace, or the works
// the controller's source holds on the server for it.
func (m *migration) works(ctx context.Context, transport, cluster string) ([]*workv1.ManifestWork, error) {
	var works []*workv1.ManifestWork
	switch transport {
	case workclient.TransportKube:
		list := &workv1.ManifestWorkList{}
		if err := m.hub.List(ctx, list, client.InNamespace(cluster), client.MatchingLabels{argocd.LabelPull: "true"}); err != nil {
			return nil, fmt.Errorf("list manifestworks of cluster %s: %w", cluster, err)
		}
		for i := range list.Items {
			works = append(works, &list.Items[i])
		}
	case workclient.TransportGRPC:
		all, err := workclient.ListServerWorks(ctx, m.server, m.SourceID, cluster)
		if err != nil {
			return nil, fmt.Errorf("list the works of cluster %s on the server: %w", cluster, err)
		}
		works = all
	}
	return slices.DeleteFunc(works, func(w *workv1.ManifestWork) bool { return workclient.ApplicationKey(w) == "" }), nil
}

// waitCopied waits until every work the cluster has on its home transport has a copy on the target that carries
// the same spec, is applied by the target's agent, and reports the same Application (the same uid) on the
// cluster. It returns the uids by work name.
func (m *migration) waitCopied(ctx context.Context, cluster, from, to string) (map[string]string, error) {
	var uids map[string]string
	err := m.wait(ctx, fmt.Sprintf("applying the copies of cluster %s's works on %s", cluster, to), func(ctx context.Context) (bool, string, error) {
		home, err := m.works(ctx, from, cluster)
		if err != nil {
			return false, "", err
		}
		copies, err := m.works(ctx, to, cluster)
		if err != nil {
			return false, "", err
		}
		byName := map[string]*workv1.ManifestWork{}
		for _, w := range copies {
			byName[w.Name] = w
		}
		uids = map[string]string{}
		var pending []string
		live := 0
		for _, w := range home {
			if !w.DeletionTimestamp.IsZero() || w.Annotations[application.AnnotationOrphan] == "true" {
				continue
			}
			live++
			uid, why, err := copied(w, byName[w.Name], from, to)
			if err != nil {
				return false, "", fmt.Errorf("%w: %w", errStop, err)
			}
			if why != "" {
				pending = append(pending, why)
				continue
			}
			uids[w.Name] = uid
		}
		m.bar.step(cluster, "%d/%d works copied to %s and applied", len(uids), live, to)
		if len(pending) == 0 {
			return true, "", nil
		}
		why, err := m.refused(ctx, cluster)
		if err != nil {
			return false, "", err
		}
		if why != "" {
			return false, "", fmt.Errorf("%w: the controller does not copy the works: %s", errStop, why)
		}
		return false, m.pendingMessage(ctx, cluster, pending, to), nil
	})
	return uids, err
}

// copied checks the copy of a work: it returns the uid of the Application both report, or why the copy is not
// there yet, or an error when the copy applied another object.
func copied(home, cp *workv1.ManifestWork, from, to string) (uid, pending string, err error) {
	name := home.Namespace + "/" + home.Name
	switch {
	case cp == nil:
		return "", fmt.Sprintf("work %s has no copy on %s yet", name, to), nil
	case !cp.DeletionTimestamp.IsZero():
		return "", fmt.Sprintf("an earlier copy of work %s on %s is still being removed", name, to), nil
	case cp.Annotations[application.AnnotationSpecHash] != home.Annotations[application.AnnotationSpecHash]:
		return "", fmt.Sprintf("the copy of work %s on %s does not carry the Application's latest spec yet", name, to), nil
	case !appstatus.FromWork(cp, appstatus.Options{}).Applied:
		return "", fmt.Sprintf("the copy of work %s is not applied by the cluster's %s agent yet", name, to), nil
	}
	uidHome, uidCopy := appstatus.SpokeUID(home), appstatus.SpokeUID(cp)
	switch {
	case uidHome == "":
		return "", fmt.Sprintf("work %s on %s reports no Application uid yet", name, from), nil
	case uidCopy == "":
		return "", fmt.Sprintf("the copy of work %s on %s reports no Application uid yet", name, to), nil
	case uidHome != uidCopy:
		return "", "", fmt.Errorf("the copy of work %s on %s reports the Application with uid %s, the work on %s uid %s: "+
			"the two agents apply different objects, so the move stopped before removing anything", name, to, uidCopy, from, uidHome)
	}
	return uidHome, "", nil
}

// refused returns the message of a hub Application of the cluster that says the controller does not run a
// transport the cluster's labels name (it then does not copy the works), or "".
func (m *migration) refused(ctx context.Context, cluster string) (string, error) {
	apps, err := m.applications(ctx, cluster)
	if err != nil {
		return "", err
	}
	for _, a := range apps {
		for _, c := range a.StatusSummary().Conditions {
			if c.Type == argocd.ConditionDeliveryError && strings.Contains(c.Message, "--migration-transport") {
				return fmt.Sprintf("Application %s/%s: %s", a.Namespace, a.Name, c.Message), nil
			}
		}
	}
	return "", nil
}

// pendingMessage lists what a step waits for (the first few) and the hub Applications of the cluster that show a
// problem, which may be why.
func (m *migration) pendingMessage(ctx context.Context, cluster string, pending []string, transport string) string {
	const shown = 5
	msg := strings.Join(pending[:min(len(pending), shown)], "; ")
	if len(pending) > shown {
		msg += fmt.Sprintf("; and %d more", len(pending)-shown)
	}
	apps, err := m.applications(ctx, cluster)
	if err != nil {
		return msg
	}
	var problems []string
	for _, a := range apps {
		for _, c := range a.StatusSummary().Conditions {
			if strings.HasSuffix(c.Type, "Error") {
				problems = append(problems, fmt.Sprintf("Application %s/%s: %s: %s", a.Namespace, a.Name, c.Type, c.Message))
			}
		}
	}
	if len(problems) > 0 {
		msg += ". The hub shows: " + strings.Join(problems[:min(len(problems), shown)], "; ")
	}
	return msg + fmt.Sprintf(". Is the controller running with both transports (--migration-transport), and the cluster's %s agent?", transport)
}

// waitRetired waits until the cluster has no works left on a transport it moved away from: the controller set
// each to orphan what it applied and deleted it, and the transport's agent removed it.
func (m *migration) waitRetired(ctx context.Context, cluster, transport string) error {
	return m.wait(ctx, fmt.Sprintf("removing cluster %s's works from %s", cluster, transport), func(ctx context.Context) (bool, string, error) {
		works, err := m.works(ctx, transport, cluster)
		if err != nil {
			return false, "", err
		}
		m.bar.step(cluster, "orphaning and removing its works on %s: %d left", transport, len(works))
		if len(works) == 0 {
			return true, "", nil
		}
		var pending []string
		for _, w := range works {
			state := "not set to orphan yet"
			switch {
			case !w.DeletionTimestamp.IsZero():
				state = "deleted, waiting for the agent to let it go"
			case w.Annotations[application.AnnotationOrphan] == "true":
				state = "set to orphan, not deleted yet"
			}
			pending = append(pending, fmt.Sprintf("work %s/%s is %s", w.Namespace, w.Name, state))
		}
		return false, m.pendingMessage(ctx, cluster, pending, transport), nil
	})
}

// verify checks a cluster that moved: each work on its new transport reports the same Application (uid) as
// before the switch, and each hub Application shows the status its work reports, without delivery errors.
func (m *migration) verify(ctx context.Context, cluster, uidsJSON string) (result, error) {
	var res result
	uids := map[string]string{}
	if uidsJSON != "" {
		if err := json.Unmarshal([]byte(uidsJSON), &uids); err != nil {
			return res, fmt.Errorf("annotation %s of managedcluster %s: %w", AnnotationUIDs, cluster, err)
		}
	}
	err := m.wait(ctx, fmt.Sprintf("checking cluster %s's Applications", cluster), func(ctx context.Context) (bool, string, error) {
		works, err := m.works(ctx, m.To, cluster)
		if err != nil {
			return false, "", err
		}
		byName := map[string]*workv1.ManifestWork{}
		byApp := map[string]*workv1.ManifestWork{}
		for _, w := range works {
			byName[w.Name] = w
			byApp[workclient.ApplicationKey(w)] = w
		}
		res = result{works: len(uids)}
		var pending []string
		for name, uid := range uids {
			w := byName[name]
			if w == nil {
				res.missing++
				continue
			}
			if got := appstatus.SpokeUID(w); got != uid {
				if got == "" {
					pending = append(pending, fmt.Sprintf("work %s/%s reports no Application uid yet", cluster, name))
					continue
				}
				return false, "", fmt.Errorf("%w: the Application of work %s/%s has uid %s on the cluster, %s before the move: it was re-created",
					errStop, cluster, name, got, uid)
			}
		}
		apps, err := m.applications(ctx, cluster)
		if err != nil {
			return false, "", err
		}
		for _, a := range apps {
			w := byApp[a.Namespace+"/"+a.Name]
			if w == nil {
				continue
			}
			if why := statusCurrent(&a, w); why != "" {
				pending = append(pending, why)
			}
		}
		m.bar.step(cluster, "checking %s", count(len(apps), "Application"))
		if len(pending) > 0 {
			return false, strings.Join(pending[:min(len(pending), 5)], "; "), nil
		}
		return true, "", nil
	})
	return res, err
}

// statusCurrent says why a hub Application does not show the status its work reports, or "".
func statusCurrent(app *argocd.Application, w *workv1.ManifestWork) string {
	s := app.StatusSummary()
	for _, c := range s.Conditions {
		if c.Type == argocd.ConditionDeliveryError || c.Type == argocd.ConditionUnknownCluster {
			return fmt.Sprintf("Application %s/%s shows %s: %s", app.Namespace, app.Name, c.Type, c.Message)
		}
	}
	reported := appstatus.FromWork(w, appstatus.Options{}).Status
	sync, _ := reported["sync"].(map[string]any)
	health, _ := reported["health"].(map[string]any)
	syncStatus, _ := sync["status"].(string)
	healthStatus, _ := health["status"].(string)
	if syncStatus != s.Sync || healthStatus != s.Health {
		return fmt.Sprintf("Application %s/%s shows %s/%s on the hub, its work reports %s/%s", app.Namespace, app.Name,
			s.Sync, s.Health, syncStatus, healthStatus)
	}
	return ""
}

// applications returns the hub's pull-model Applications of a cluster.
func (m *migration) applications(ctx context.Context, cluster string) ([]argocd.Application, error) {
	list := &argocd.ApplicationList{}
	if err := m.hub.List(ctx, list, client.MatchingLabels{argocd.LabelPull: "true"}); err != nil {
		return nil, fmt.Errorf("list applications: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(a argocd.Application) bool { return argocd.ManagedCluster(&a) != cluster }), nil
}

// prerequisites checks, before anything changes, what the moves need: on the server, a consumer for each cluster
// (registered here when missing) with its agent subscribed; on the hub, each cluster's namespace and its
// klusterlet available. Each cluster needs the agents of every transport its works are on or go to. It lists
// every problem it finds.
func (m *migration) prerequisites(ctx context.Context, todo []plan) error {
	var problems []string
	for _, p := range todo {
		need := []string{m.To, p.move.Home, p.move.CopyTo, p.move.Retire}
		for _, t := range workclient.Transports {
			if !slices.Contains(need, t) {
				continue
			}
			var why string
			var err error
			if t == workclient.TransportGRPC {
				why, err = m.grpcAgent(ctx, p.cluster)
			} else {
				why, err = m.kubeAgent(ctx, p.cluster)
			}
			if err != nil {
				return err
			}
			if why != "" {
				problems = append(problems, fmt.Sprintf("cluster %s: %s", p.cluster, why))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the moves cannot start; nothing was changed:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// grpcAgent registers the cluster's consumer on the server when it is missing, and says why its agent is not
// ready ("" when it is subscribed).
func (m *migration) grpcAgent(ctx context.Context, cluster string) (string, error) {
	c, err := m.server.GetConsumer(ctx, cluster)
	if restapi.HasStatus(err, http.StatusNotFound) {
		if err := m.server.EnsureConsumer(ctx, cluster); err != nil {
			return "", err
		}
		m.printf("registered cluster %s as a consumer of the server\n", cluster)
		c, err = m.server.GetConsumer(ctx, cluster)
	}
	if err != nil {
		return "", fmt.Errorf("get consumer %s: %w", cluster, err)
	}
	switch {
	case c.ConnectedAgents == nil:
		m.printf("cluster %s: the server does not say whether an agent is subscribed (a Maestro server?); the applied copies will tell\n", cluster)
		return "", nil
	case *c.ConnectedAgents == 0:
		return "no agent is subscribed to the server for it: run its agent with --driver=grpc", nil
	}
	return "", nil
}

// kubeAgent says why the cluster's agent on the hub's ManifestWorks cannot be counted on ("" when it can): its
// namespace on the hub is missing, or its klusterlet is not available (OCM's registration keeps the
// ManagedCluster's Available condition from the agents' lease).
func (m *migration) kubeAgent(ctx context.Context, cluster string) (string, error) {
	ns := &corev1.Namespace{}
	if err := m.hub.Get(ctx, client.ObjectKey{Name: cluster}, ns); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return fmt.Sprintf("namespace %s, where its ManifestWorks live, does not exist on the hub", cluster), nil
		}
		return "", fmt.Errorf("get namespace %s: %w", cluster, err)
	}
	mc := &clusterv1.ManagedCluster{}
	if err := m.hub.Get(ctx, client.ObjectKey{Name: cluster}, mc); err != nil {
		return "", fmt.Errorf("get managedcluster %s: %w", cluster, err)
	}
	if !meta.IsStatusConditionTrue(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable) {
		return fmt.Sprintf("its ManagedCluster is not %s: the agent that reads its ManifestWorks may not run",
			clusterv1.ManagedClusterConditionAvailable), nil
	}
	return "", nil
}
