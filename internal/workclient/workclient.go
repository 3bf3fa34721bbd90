// Package workclient is the transport seam between the hub controllers and the managed clusters: one interface
// for delivering ManifestWorks and reading their status back, with two transports. The kube transport keeps
// ManifestWork objects on the hub (the basic OCM pull model); the grpc transport publishes them as CloudEvents
// to a Maestro-compatible server and keeps nothing in the hub's etcd. The controllers do not know which one
// they run on. It owns the transports' names and the raw-feedback limits each one
// carries; it holds no controller logic.
package workclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Transports: how works travel between the hub and the managed clusters. The hub controller's --transport, the
// agent's --driver (the OCM work agent's driver names), the simulator's and the demo's --transport all take
// these names.
const (
	// TransportKube keeps ManifestWork objects on the hub (the basic OCM pull model).
	TransportKube = "kube"
	// TransportGRPC publishes works as CloudEvents over gRPC to a Maestro-compatible server.
	TransportGRPC = "grpc"
)

// Client delivers works and reports their status.
type Client interface {
	// Apply creates the work, or updates it to the given labels, annotations and spec.
	Apply(ctx context.Context, work *workv1.ManifestWork) error
	// Delete asks for a work's deletion. The work stays, marked for deletion, until the managed cluster's
	// agent has removed what it applied. Deleting a work that does not exist is not an error.
	Delete(ctx context.Context, namespace, name string) error
	// Get returns a work from the client's cache, or an error for which apierrors.IsNotFound is true.
	Get(ctx context.Context, namespace, name string) (*workv1.ManifestWork, error)
	// ListForApplication returns the cached works of a hub Application, in every cluster. Their status may be
	// left out (the grpc transport leaves it out): Get returns a work with its status.
	ListForApplication(ctx context.Context, appNamespace, appName string) ([]*workv1.ManifestWork, error)
	// Informer delivers the add, update and delete events of the works. It is synced once the transport has
	// all the works. The works of the events may come without their status (the grpc transport's do).
	Informer() cache.Informer
	// Ready returns why the transport cannot deliver now, or nil: the works are not loaded yet, or the
	// server behind the transport does not answer.
	Ready(ctx context.Context) error
}

// ErrUnknownCluster is wrapped by the error of Apply when the cluster does not exist for the transport: no
// cluster namespace on the hub, or no consumer of that name on the server.
var ErrUnknownCluster = errors.New("unknown cluster")

// UnknownClusterError returns an error that wraps ErrUnknownCluster.
func UnknownClusterError(cluster string, cause error) error {
	return fmt.Errorf("cluster %q is not known to the transport (%w): %v", cluster, ErrUnknownCluster, cause)
}

// ErrUnavailable is wrapped by the errors of Apply and Delete when the transport cannot reach its server: the
// connection is down or being re-established. The change is published once the connection is back; retrying
// sooner only fails again.
var ErrUnavailable = errors.New("the transport's server is unreachable")

// Unreachable reports whether a CloudEvents client's publish failed because its server could not be reached
// or could not commit: the error wraps ErrUnavailable, or is sdk-go's or gRPC's wording of it (a client not
// connected yet or again, a connection gone or closing, the server's Unavailable answer).
func Unreachable(err error) bool {
	return err != nil && (errors.Is(err, ErrUnavailable) || unreachable(err.Error()))
}

// RetryUnreachable is how soon a change that could not be published, because the server was unreachable, is
// tried again: about as soon as the client is back (its reconnects are paced at most three seconds apart), at
// a steady pace rather than the growing backoff of a failed reconcile. A five-second outage in a mass delete
// failed each Application a dozen times over, and the last ones waited more than two minutes once the server
// was back.
func RetryUnreachable() time.Duration {
	return time.Second + rand.N(time.Second) //nolint:gosec // jitter, not a secret
}

// IndexApplication is the cache index of works by "namespace/name" of their hub Application.
const IndexApplication = "hubApplication"

// ApplicationKey returns the hub Application a work belongs to, as "namespace/name", or "" for a work that is
// not a pull-model work. Only works labelled as pull-model works are argocd-pull's to manage.
func ApplicationKey(work *workv1.ManifestWork) string {
	return applicationKey(work, func(key string) string { return work.Annotations[key] })
}

// applicationKey is ApplicationKey of a work whose metadata has its labels and whose annotations annotation reads.
func applicationKey(meta metav1.Object, annotation func(key string) string) string {
	if !argocd.IsPullApplication(meta) {
		return ""
	}
	ns, name := annotation(argocd.AnnotationHubAppNamespace), annotation(argocd.AnnotationHubAppName)
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}
