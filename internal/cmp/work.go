package cmp

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// MaxManifestBytes is OCM's limit on the manifests of one ManifestWork (the hub's work webhook refuses more,
// and an agent would not apply it): 500 KiB, counted as the webhook counts it, over the manifests' JSON.
const MaxManifestBytes = 500 * 1024

// maxWorkNameLength is the longest work name OCM can apply: the agent names its AppliedManifestWork
// "<64-character hub hash>-<work name>", at most 253 characters.
const maxWorkNameLength = 253 - 65

// Target says where the rendered manifests go.
type Target struct {
	// Clusters are the managed clusters; one ManifestWork each, in the cluster's namespace on the hub.
	Clusters []string
	// AppName and AppNamespace are the hub Application's; the work is named after it.
	AppName, AppNamespace string
	// AppSet is the ApplicationSet ("namespace/name") that generated the Application, when known.
	AppSet string
	// Namespace is given to namespaced objects that have none.
	Namespace string
	// CreateNamespace adds Namespace to the work (Argo CD's CreateNamespace=true); it is left on the cluster
	// when the work goes, as argocd-pull's controller leaves the namespaces it creates.
	CreateNamespace bool
}

// BuildWorks wraps the normalized objects into one ManifestWork per target cluster: the OCM pull model's
// annotations, server-side apply by the work agent, status feedback for the kinds whose health the Argo CD
// health check of ManifestWork computes, and the delete option of argocd-pull's controller.
func BuildWorks(objs []Object, kinds *Kinds, t Target, maxBytes int) ([]*workv1.ManifestWork, error) {
	if len(t.Clusters) == 0 {
		return nil, errNoTarget
	}
	if len(t.AppName) > maxWorkNameLength {
		return nil, fmt.Errorf("the Application's name is %d characters long; a ManifestWork named after it can have at most %d",
			len(t.AppName), maxWorkNameLength)
	}
	var manifests []workv1.Manifest
	var orphans []workv1.OrphaningRule
	size := 0
	if t.CreateNamespace && t.Namespace != "" && !rendersNamespace(objs, t.Namespace) {
		raw, err := namespaceObject(t.Namespace).MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode namespace %s: %w", t.Namespace, err)
		}
		size += len(raw)
		manifests = append(manifests, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
		orphans = append(orphans, workv1.OrphaningRule{Resource: "namespaces", Name: t.Namespace})
	}
	for _, o := range objs {
		raw, err := o.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", o.describe(), err)
		}
		size += len(raw)
		manifests = append(manifests, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	if size > maxBytes {
		return nil, fmt.Errorf("the manifests take %d bytes; a ManifestWork holds at most %d (OCM's limit): split the Application",
			size, maxBytes)
	}
	configs := manifestConfigs(objs, kinds)

	works := make([]*workv1.ManifestWork, 0, len(t.Clusters))
	for _, cluster := range t.Clusters {
		w := &workv1.ManifestWork{
			TypeMeta: metav1.TypeMeta{APIVersion: workv1.GroupVersion.String(), Kind: "ManifestWork"},
			ObjectMeta: metav1.ObjectMeta{
				Name:      t.AppName,
				Namespace: cluster,
				Annotations: map[string]string{
					argocd.AnnotationHubAppNamespace: t.AppNamespace,
					argocd.AnnotationHubAppName:      t.AppName,
				},
			},
			Spec: workv1.ManifestWorkSpec{
				Workload: workv1.ManifestsTemplate{Manifests: manifests},
				DeleteOption: &workv1.DeleteOption{
					PropagationPolicy: workv1.DeletePropagationPolicyTypeSelectivelyOrphan,
					SelectivelyOrphan: &workv1.SelectivelyOrphan{OrphaningRules: orphans},
				},
				ManifestConfigs: configs,
			},
		}
		if t.AppSet != "" {
			w.Labels = map[string]string{argocd.LabelAppSet: "true"}
			w.Annotations[argocd.AnnotationHostingAppSet] = t.AppSet
		}
		works = append(works, w)
	}
	return works, nil
}

// manifestConfigs returns one option per resource type in the work (any namespace, which matches cluster-scoped
// objects too, and any name): server-side
// apply with the work agent's field manager, forced, as Argo CD's server-side sync does, so the agent owns the
// fields the manifests set and reverts changes to them on the cluster; and, for the kinds in statusFeedback,
// the status fields the health check reads, watched rather than polled.
func manifestConfigs(objs []Object, kinds *Kinds) []workv1.ManifestConfigOption {
	types := map[schema.GroupKind]bool{}
	for _, o := range objs {
		types[o.GroupVersionKind().GroupKind()] = true
	}
	gks := make([]schema.GroupKind, 0, len(types))
	for gk := range types {
		gks = append(gks, gk)
	}
	sort.Slice(gks, func(i, j int) bool { return gks[i].String() < gks[j].String() })

	configs := make([]workv1.ManifestConfigOption, 0, len(gks))
	for _, gk := range gks {
		c := workv1.ManifestConfigOption{
			ResourceIdentifier: workv1.ResourceIdentifier{Group: gk.Group, Resource: kinds.Resource(gk), Namespace: "*", Name: "*"},
			UpdateStrategy: &workv1.UpdateStrategy{
				Type:            workv1.UpdateStrategyTypeServerSideApply,
				ServerSideApply: &workv1.ServerSideApplyConfig{Force: true, FieldManager: workv1.DefaultFieldManager},
			},
		}
		if paths, ok := statusFeedback[gk]; ok {
			c.FeedbackRules = []workv1.FeedbackRule{{Type: workv1.JSONPathsType, JsonPaths: paths}}
			c.FeedbackScrapeType = workv1.FeedbackWatchType
		}
		configs = append(configs, c)
	}
	return configs
}

func rendersNamespace(objs []Object, name string) bool {
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" && o.GetName() == name {
			return true
		}
	}
	return false
}

func namespaceObject(name string) *unstructured.Unstructured {
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	return ns
}

// statusFeedback are the fields the work agent reports back for the kinds Argo CD has built-in health for
// (gitops-engine's pkg/health), named as in OCM's WellKnownStatus where it has them. Paths start at the object's
// root, as the OCM work agent reads them, so that the desired generation and replicas come back with the
// observed ones. The ManifestWork health check (health.lua) reads exactly these names.
var statusFeedback = map[schema.GroupKind][]workv1.JsonPath{
	{Group: "apps", Kind: "Deployment"}: {
		{Name: "Generation", Path: ".metadata.generation"},
		{Name: "ObservedGeneration", Path: ".status.observedGeneration"},
		{Name: "DesiredReplicas", Path: ".spec.replicas"},
		{Name: "Paused", Path: ".spec.paused"},
		{Name: "Replicas", Path: ".status.replicas"},
		{Name: "UpdatedReplicas", Path: ".status.updatedReplicas"},
		{Name: "ReadyReplicas", Path: ".status.readyReplicas"},
		{Name: "AvailableReplicas", Path: ".status.availableReplicas"},
		{Name: "ProgressingReason", Path: `.status.conditions[?(@.type=="Progressing")].reason`},
		{Name: "ProgressingMessage", Path: `.status.conditions[?(@.type=="Progressing")].message`},
	},
	{Group: "apps", Kind: "StatefulSet"}: {
		{Name: "Generation", Path: ".metadata.generation"},
		{Name: "ObservedGeneration", Path: ".status.observedGeneration"},
		{Name: "DesiredReplicas", Path: ".spec.replicas"},
		{Name: "UpdateStrategy", Path: ".spec.updateStrategy.type"},
		{Name: "Partition", Path: ".spec.updateStrategy.rollingUpdate.partition"},
		{Name: "ReadyReplicas", Path: ".status.readyReplicas"},
		{Name: "UpdatedReplicas", Path: ".status.updatedReplicas"},
		{Name: "CurrentReplicas", Path: ".status.currentReplicas"},
		{Name: "CurrentRevision", Path: ".status.currentRevision"},
		{Name: "UpdateRevision", Path: ".status.updateRevision"},
	},
	{Group: "apps", Kind: "DaemonSet"}: {
		{Name: "Generation", Path: ".metadata.generation"},
		{Name: "ObservedGeneration", Path: ".status.observedGeneration"},
		{Name: "UpdateStrategy", Path: ".spec.updateStrategy.type"},
		{Name: "DesiredNumberScheduled", Path: ".status.desiredNumberScheduled"},
		{Name: "UpdatedNumberScheduled", Path: ".status.updatedNumberScheduled"},
		{Name: "NumberAvailable", Path: ".status.numberAvailable"},
		{Name: "NumberReady", Path: ".status.numberReady"},
	},
	{Group: "apps", Kind: "ReplicaSet"}: {
		{Name: "Generation", Path: ".metadata.generation"},
		{Name: "ObservedGeneration", Path: ".status.observedGeneration"},
		{Name: "DesiredReplicas", Path: ".spec.replicas"},
		{Name: "AvailableReplicas", Path: ".status.availableReplicas"},
		{Name: "ReplicaFailure", Path: `.status.conditions[?(@.type=="ReplicaFailure")].status`},
		{Name: "ReplicaFailureMessage", Path: `.status.conditions[?(@.type=="ReplicaFailure")].message`},
	},
	{Group: "batch", Kind: "Job"}: {
		{Name: "JobComplete", Path: `.status.conditions[?(@.type=="Complete")].status`},
		{Name: "JobCompleteMessage", Path: `.status.conditions[?(@.type=="Complete")].message`},
		{Name: "JobFailed", Path: `.status.conditions[?(@.type=="Failed")].status`},
		{Name: "JobFailedMessage", Path: `.status.conditions[?(@.type=="Failed")].message`},
		{Name: "JobSuspended", Path: `.status.conditions[?(@.type=="Suspended")].status`},
		{Name: "JobSucceeded", Path: ".status.succeeded"},
	},
	{Group: "", Kind: "Pod"}: {
		{Name: "PodPhase", Path: ".status.phase"},
		{Name: "PodReady", Path: `.status.conditions[?(@.type=="Ready")].status`},
		{Name: "PodMessage", Path: ".status.message"},
		{Name: "RestartPolicy", Path: ".spec.restartPolicy"},
	},
	{Group: "", Kind: "PersistentVolumeClaim"}: {
		{Name: "Phase", Path: ".status.phase"},
	},
}
