package gitopscluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Labels, annotations and values of the Argo CD cluster secrets.
const (
	// LabelSecretType is Argo CD's label that makes a Secret a cluster (or repository) definition.
	LabelSecretType = "argocd.argoproj.io/secret-type" //nolint:gosec // a label key, not a credential
	// SecretTypeCluster is the LabelSecretType value of a cluster secret.
	SecretTypeCluster = "cluster"
	// LabelACMCluster marks a cluster secret as an OCM managed cluster, as ACM's GitOpsCluster does.
	LabelACMCluster = "apps.open-cluster-management.io/acm-cluster"
	// LabelClusterName is the managed cluster's name, as ACM's GitOpsCluster sets it.
	LabelClusterName = "apps.open-cluster-management.io/cluster-name"
	// LabelClusterServer is the host of the secret's server URL, as ACM's GitOpsCluster sets it.
	LabelClusterServer = "apps.open-cluster-management.io/cluster-server"
	// LabelManagedBy marks the objects this controller created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the LabelManagedBy value of the objects this controller created.
	ManagedBy = "argocd-pull-gitopscluster"
	// AnnotationOwner names the GitOpsCluster ("namespace/name") a cluster secret belongs to. The controller
	// changes and deletes only Secrets that carry it; annotating an existing secret hands it over.
	AnnotationOwner = "apps.open-cluster-management.io/gitopscluster"
	// secretNameSuffix is the suffix of ACM's pull-model cluster secrets.
	secretNameSuffix = "-application-manager-cluster-secret"
)

// SecretName returns the name of a managed cluster's secret in the Argo CD namespace: the name ACM's
// GitOpsCluster uses for pull-model secrets, shortened with a hash when it would be too long.
func SecretName(cluster string) string {
	name := cluster + secretNameSuffix
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(cluster))
	hash := hex.EncodeToString(sum[:])[:10]
	keep := validation.DNS1123SubdomainMaxLength - len(secretNameSuffix) - len(hash) - 1
	return cluster[:keep] + "-" + hash + secretNameSuffix
}

// ownerKey is the AnnotationOwner value of a GitOpsCluster's secrets.
func ownerKey(gc *v1alpha1.GitOpsCluster) string {
	return types.NamespacedName{Namespace: gc.Namespace, Name: gc.Name}.String()
}

func secretOwner(s *corev1.Secret) string { return s.Annotations[AnnotationOwner] }

// secretCluster returns the managed cluster a cluster secret stands for.
func secretCluster(s *corev1.Secret) string {
	if c := s.Labels[LabelClusterName]; c != "" {
		return c
	}
	return string(s.Data["name"])
}

// desiredSecret returns the cluster secret of one managed cluster, owned by gc: no credentials, the managed
// cluster's labels, and the labels ACM's GitOpsCluster sets, which take precedence.
func desiredSecret(gc *v1alpha1.GitOpsCluster, argoNamespace, cluster string, clusterLabels map[string]string) *corev1.Secret {
	server := argocd.ClusterServerURL(cluster)
	labels := maps.Clone(clusterLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelSecretType] = SecretTypeCluster
	labels[LabelACMCluster] = "true"
	labels[LabelClusterName] = cluster
	labels[LabelManagedBy] = ManagedBy
	host := cluster + "." + argocd.ClusterServerDomain
	if len(validation.IsValidLabelValue(host)) == 0 {
		labels[LabelClusterServer] = host
	} else {
		delete(labels, LabelClusterServer)
	}
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        SecretName(cluster),
			Namespace:   argoNamespace,
			Labels:      labels,
			Annotations: map[string]string{AnnotationOwner: ownerKey(gc)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"name": []byte(cluster), "server": []byte(server)},
	}
	// An owner reference cannot cross namespaces; AnnotationOwner is what marks ownership everywhere.
	if gc.Namespace == argoNamespace {
		s.OwnerReferences = []metav1.OwnerReference{ownerReference(gc)}
	}
	return s
}

func ownerReference(gc *v1alpha1.GitOpsCluster) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.GroupVersion.String(),
		Kind:               "GitOpsCluster",
		Name:               gc.Name,
		UID:                gc.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}
}

// secretUpToDate reports whether current already has everything desired sets. Labels are compared exactly: the
// controller owns the secret, and a cluster's labels are edited on its ManagedCluster.
func secretUpToDate(current, desired *corev1.Secret) bool {
	return maps.Equal(current.Labels, desired.Labels) &&
		secretOwner(current) == secretOwner(desired) &&
		maps.EqualFunc(current.Data, desired.Data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		slices.EqualFunc(current.OwnerReferences, desired.OwnerReferences, func(a, b metav1.OwnerReference) bool {
			return a.UID == b.UID && a.Kind == b.Kind && a.Name == b.Name && a.APIVersion == b.APIVersion
		})
}

// withDesired returns current changed to desired, keeping the annotations others set.
func withDesired(current, desired *corev1.Secret) *corev1.Secret {
	s := current.DeepCopy()
	s.Labels = maps.Clone(desired.Labels)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationOwner] = secretOwner(desired)
	s.Data = maps.Clone(desired.Data)
	s.OwnerReferences = slices.Clone(desired.OwnerReferences)
	return s
}

// action is what to do about one selected cluster's secret.
type action int

const (
	actCreate action = iota
	actUpToDate
	actUpdate
	actShared
	actConflict
)

// classify decides what to do with the secret that has a selected cluster's name. ownerExists tells whether the
// GitOpsCluster named by a secret's owner annotation still exists.
func classify(current, desired *corev1.Secret, ownerExists func(string) bool) action {
	if current == nil {
		return actCreate
	}
	switch owner := secretOwner(current); {
	case owner == secretOwner(desired):
		if secretUpToDate(current, desired) {
			return actUpToDate
		}
		return actUpdate
	case owner != "" && ownerExists(owner):
		return actShared
	case owner != "":
		// Left by a GitOpsCluster that no longer exists: the controller's own garbage, adopted.
		return actUpdate
	default:
		return actConflict
	}
}

// secretChange is one secret to change: current as observed, next as it should be.
type secretChange struct {
	current, next *corev1.Secret
}

// secretPlan is what syncing the cluster secrets of one GitOpsCluster takes.
type secretPlan struct {
	create   []*corev1.Secret
	update   []secretChange
	handover []secretChange
	remove   []*corev1.Secret
	upToDate int
	// shared lists the clusters another GitOpsCluster's secret registers.
	shared []string
	// conflicts describes the clusters a Secret or Argo CD cluster the controller does not own is in the way of.
	conflicts []string
}

// planInput is what planSecrets decides from.
type planInput struct {
	gc            *v1alpha1.GitOpsCluster
	argoNamespace string
	// clusters are the selected clusters, sorted.
	clusters []string
	// clusterLabels are the labels of the ManagedClusters that exist.
	clusterLabels map[string]map[string]string
	// existing are the cluster secrets in the Argo CD namespace.
	existing []corev1.Secret
	// owned are the secrets gc owns, in any namespace.
	owned []corev1.Secret
	// ownerExists tells whether a GitOpsCluster ("namespace/name") exists.
	ownerExists func(string) bool
	// successors maps a cluster to another GitOpsCluster that registers it with the same Argo CD, to hand the
	// secret over to instead of deleting it.
	successors map[string]*v1alpha1.GitOpsCluster
	// consoleConfigs are the selected clusters' Argo CD cluster configs with the console on (nil without it).
	consoleConfigs map[string][]byte
}

// planSecrets compares the secrets the selected clusters need with the secrets that exist. It never plans a
// change to a Secret another GitOpsCluster or anyone else owns.
func planSecrets(in planInput) secretPlan {
	var p secretPlan
	me := ownerKey(in.gc)
	byName := map[string]*corev1.Secret{}
	definedBy := map[string][]string{} // Argo CD cluster name → secrets not owned by gc that define it
	for i := range in.existing {
		s := &in.existing[i]
		byName[s.Name] = s
		if secretOwner(s) != me {
			definedBy[string(s.Data["name"])] = append(definedBy[string(s.Data["name"])], s.Name)
		}
	}
	keep := map[types.NamespacedName]bool{}
	for _, cluster := range in.clusters {
		desired := desiredSecret(in.gc, in.argoNamespace, cluster, in.clusterLabels[cluster])
		if cfg := in.consoleConfigs[cluster]; cfg != nil {
			desired.Data["config"] = cfg
		}
		keep[client.ObjectKeyFromObject(desired)] = true
		if others := slices.DeleteFunc(slices.Clone(definedBy[cluster]), func(n string) bool { return n == desired.Name }); len(others) > 0 {
			p.conflicts = append(p.conflicts, fmt.Sprintf("%s: Argo CD cluster %q is already defined by Secret %s/%s",
				cluster, cluster, in.argoNamespace, others[0]))
			continue
		}
		current := byName[desired.Name]
		switch classify(current, desired, in.ownerExists) {
		case actCreate:
			p.create = append(p.create, desired)
		case actUpToDate:
			p.upToDate++
		case actUpdate:
			p.update = append(p.update, secretChange{current: current, next: withDesired(current, desired)})
		case actShared:
			p.shared = append(p.shared, fmt.Sprintf("%s (GitOpsCluster %s)", cluster, secretOwner(current)))
		case actConflict:
			p.conflicts = append(p.conflicts, fmt.Sprintf("%s: Secret %s/%s exists and is not managed by a GitOpsCluster",
				cluster, in.argoNamespace, desired.Name))
		}
	}
	for i := range in.owned {
		s := &in.owned[i]
		if keep[client.ObjectKeyFromObject(s)] {
			continue
		}
		cluster := secretCluster(s)
		if next := in.successors[cluster]; next != nil && s.Namespace == in.argoNamespace && s.Name == SecretName(cluster) {
			desired := desiredSecret(next, in.argoNamespace, cluster, in.clusterLabels[cluster])
			p.handover = append(p.handover, secretChange{current: s, next: withDesired(s, desired)})
			continue
		}
		p.remove = append(p.remove, s)
	}
	return p
}

// registration is the outcome of syncing the cluster secrets.
type registration struct {
	// skipped: the selection or the Argo CD namespace is unknown, so no secret was changed.
	skipped bool
	// kept is the number of secrets kept while skipped.
	kept       int
	registered int
	created    int
	updated    int
	removed    int
	handedOver int
	shared     []string
	conflicts  []string
	failures   []string
	// uncachedConflict: a conflicting Secret is outside the watched cache, so its removal raises no event.
	uncachedConflict bool
}

func (reg *registration) changed() bool {
	return reg.created+reg.updated+reg.removed+reg.handedOver > 0
}

// maxParallelWrites bounds the concurrent writes of one reconcile.
const maxParallelWrites = 8

// applySecretPlan carries out a plan. Write failures are recorded in the registration, not returned.
func (r *Reconciler) applySecretPlan(ctx context.Context, in planInput, p secretPlan, reg *registration) {
	reg.registered += p.upToDate + len(p.shared)
	reg.shared = append(reg.shared, p.shared...)
	reg.conflicts = append(reg.conflicts, p.conflicts...)

	var mu sync.Mutex
	record := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}
	fail := func(format string, args ...any) {
		record(func() { reg.failures = append(reg.failures, fmt.Sprintf(format, args...)) })
	}
	var g errgroup.Group
	g.SetLimit(maxParallelWrites)
	for _, desired := range p.create {
		g.Go(func() error {
			outcome, err := r.createSecret(ctx, in, desired)
			if err != nil {
				fail("%s: %v", secretCluster(desired), err)
				return nil
			}
			record(func() { outcome.addTo(reg) })
			return nil
		})
	}
	for _, c := range p.update {
		g.Go(func() error {
			if err := r.patchSecret(ctx, c); err != nil {
				fail("%s: %v", secretCluster(c.next), err)
				return nil
			}
			record(func() { reg.updated++; reg.registered++ })
			return nil
		})
	}
	for _, c := range p.handover {
		g.Go(func() error {
			if err := r.patchSecret(ctx, c); err != nil {
				fail("hand over %s: %v", secretCluster(c.next), err)
				return nil
			}
			record(func() { reg.handedOver++ })
			return nil
		})
	}
	for _, s := range p.remove {
		g.Go(func() error {
			if err := r.deleteSecret(ctx, s); err != nil {
				fail("remove %s: %v", secretCluster(s), err)
				return nil
			}
			record(func() { reg.removed++ })
			return nil
		})
	}
	_ = g.Wait()
	slices.Sort(reg.failures)
	slices.Sort(reg.conflicts)
	slices.Sort(reg.shared)
}

// createOutcome is what creating one secret came to.
type createOutcome struct {
	act       action
	uncached  bool
	conflict  string
	sharedMsg string
}

func (o createOutcome) addTo(reg *registration) {
	switch o.act {
	case actCreate:
		reg.created++
		reg.registered++
	case actUpdate:
		reg.updated++
		reg.registered++
	case actUpToDate:
		reg.registered++
	case actShared:
		reg.registered++
		reg.shared = append(reg.shared, o.sharedMsg)
	case actConflict:
		reg.conflicts = append(reg.conflicts, o.conflict)
		reg.uncachedConflict = reg.uncachedConflict || o.uncached
	}
}

// createSecret creates a cluster secret. When a Secret of that name exists that the cache did not show (the
// cache lags, or it lacks the cluster secret label), it is read from the API server and classified again, so
// a Secret someone else owns is never overwritten.
func (r *Reconciler) createSecret(ctx context.Context, in planInput, desired *corev1.Secret) (createOutcome, error) {
	err := r.Client.Create(ctx, desired.DeepCopy(), client.FieldOwner(FieldOwner))
	if err == nil {
		return createOutcome{act: actCreate}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return createOutcome{}, fmt.Errorf("create secret %s: %w", client.ObjectKeyFromObject(desired), err)
	}
	live := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
		return createOutcome{}, fmt.Errorf("get secret %s: %w", client.ObjectKeyFromObject(desired), err)
	}
	switch act := classify(live, desired, in.ownerExists); act {
	case actUpdate:
		if err := r.patchSecret(ctx, secretChange{current: live, next: withDesired(live, desired)}); err != nil {
			return createOutcome{}, err
		}
		return createOutcome{act: actUpdate}, nil
	case actShared:
		return createOutcome{act: act, sharedMsg: fmt.Sprintf("%s (GitOpsCluster %s)", secretCluster(desired), secretOwner(live))}, nil
	case actConflict:
		return createOutcome{act: act, uncached: live.Labels[LabelSecretType] != SecretTypeCluster,
			conflict: fmt.Sprintf("%s: Secret %s/%s exists and is not managed by a GitOpsCluster",
				secretCluster(desired), live.Namespace, live.Name)}, nil
	default:
		return createOutcome{act: act}, nil
	}
}

// patchSecret changes a secret the controller owns with a merge patch that fails if the secret changed since it
// was read.
func (r *Reconciler) patchSecret(ctx context.Context, c secretChange) error {
	patch := client.MergeFromWithOptions(c.current, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Patch(ctx, c.next, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("patch secret %s: %w", client.ObjectKeyFromObject(c.current), err)
	}
	return nil
}

// deleteSecret deletes a secret the controller owns, only if it is still the object that was read.
func (r *Reconciler) deleteSecret(ctx context.Context, s *corev1.Secret) error {
	pre := metav1.Preconditions{UID: &s.UID}
	err := r.Client.Delete(ctx, s, &client.DeleteOptions{Preconditions: &pre})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete secret %s: %w", client.ObjectKeyFromObject(s), err)
	}
	return nil
}

// syncSecrets keeps the cluster secrets of gc in step with the selected clusters. Without a selection or an
// Argo CD namespace it changes nothing and keeps what exists (a Placement being recreated must not make Argo CD
// forget clusters, which would make ApplicationSets delete their Applications).
func (r *Reconciler) syncSecrets(ctx context.Context, gc *v1alpha1.GitOpsCluster, obs *observation) error {
	owned, err := r.ownedSecrets(ctx, gc)
	if err != nil {
		return err
	}
	argoNamespace := gc.ArgoNamespace()
	if !obs.placement.resolved || !obs.argoNamespaceFound {
		obs.registration = registration{skipped: true}
		for i := range owned {
			if owned[i].Namespace == argoNamespace {
				obs.registration.kept++
			}
		}
		return nil
	}
	in := planInput{gc: gc, argoNamespace: argoNamespace, clusters: obs.placement.clusters, owned: owned}
	if in.clusterLabels, err = r.clusterLabels(ctx, obs.placement.clusters); err != nil {
		return err
	}
	existing := &corev1.SecretList{}
	if err := r.Client.List(ctx, existing, client.InNamespace(argoNamespace),
		client.MatchingLabels{LabelSecretType: SecretTypeCluster}); err != nil {
		return fmt.Errorf("list cluster secrets in namespace %s: %w", argoNamespace, err)
	}
	in.existing = existing.Items
	if obs.console.ok {
		if in.consoleConfigs, err = consoleConfigs(obs.console.creds, in.clusters, in.existing); err != nil {
			obs.console.ok, obs.console.reason, obs.console.message = false, v1alpha1.ReasonConsoleCertificatesFailed, err.Error()
		}
		obs.consoleRenewAt = renewAt(in.consoleConfigs)
	}
	in.ownerExists = r.gitOpsClusterExists(ctx)
	if in.successors, err = r.successors(ctx, gc, argoNamespace); err != nil {
		return err
	}
	r.applySecretPlan(ctx, in, planSecrets(in), &obs.registration)
	return nil
}

// ownedSecrets returns the cluster secrets gc owns, in every namespace, from the cache.
func (r *Reconciler) ownedSecrets(ctx context.Context, gc *v1alpha1.GitOpsCluster) ([]corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexSecretOwner: ownerKey(gc)}); err != nil {
		return nil, fmt.Errorf("list secrets of gitopscluster %s: %w", ownerKey(gc), err)
	}
	return list.Items, nil
}

// clusterLabels returns the labels of the ManagedClusters of the given names that exist.
func (r *Reconciler) clusterLabels(ctx context.Context, clusters []string) (map[string]map[string]string, error) {
	labels := map[string]map[string]string{}
	for _, name := range clusters {
		mc := &clusterv1.ManagedCluster{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, mc)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("get managedcluster %s: %w", name, err)
		default:
			labels[name] = mc.Labels
		}
	}
	return labels, nil
}

// gitOpsClusterExists returns a function that tells, from the cache, whether a GitOpsCluster exists.
func (r *Reconciler) gitOpsClusterExists(ctx context.Context) func(string) bool {
	return func(key string) bool {
		ns, name, ok := splitKey(key)
		if !ok {
			return false
		}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &v1alpha1.GitOpsCluster{})
		// Anything but a definite NotFound counts as existing: adopting a live owner's secret would be worse.
		return !apierrors.IsNotFound(err)
	}
}

// successors maps each cluster that another live GitOpsCluster with the same Argo CD namespace selects to that
// GitOpsCluster (the first by namespace/name).
func (r *Reconciler) successors(ctx context.Context, gc *v1alpha1.GitOpsCluster, argoNamespace string) (map[string]*v1alpha1.GitOpsCluster, error) {
	list := &v1alpha1.GitOpsClusterList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexArgoNamespace: argoNamespace}); err != nil {
		return nil, fmt.Errorf("list gitopsclusters of argo cd namespace %s: %w", argoNamespace, err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.GitOpsCluster) int { return strings.Compare(ownerKey(&a), ownerKey(&b)) })
	next := map[string]*v1alpha1.GitOpsCluster{}
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == gc.UID || !other.DeletionTimestamp.IsZero() {
			continue
		}
		res, err := r.readPlacement(ctx, other)
		if err != nil {
			return nil, err
		}
		for _, c := range res.clusters {
			if _, taken := next[c]; !taken {
				next[c] = other
			}
		}
	}
	return next, nil
}
