package testclients

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// Source is the hub controller's grpc transport, as the controller starts it: it lists the works from the
// server's REST API, subscribes, and resyncs statuses cluster by cluster after every (re)subscription.
type Source struct {
	transport *workclient.GRPC
}

// StartSource starts the transport and waits until it has listed the works; it stops when ctx ends.
func StartSource(ctx context.Context, o workclient.GRPCOptions) (*Source, error) {
	g, err := workclient.NewGRPC(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("start the grpc transport of source %s: %w", o.SourceID, err)
	}
	if err := g.WaitForSync(ctx); err != nil {
		return nil, err
	}
	return &Source{transport: g}, nil
}

// Apply publishes a work of ConfigMaps with the given names: new, or the next generation of a known one.
func (s *Source) Apply(ctx context.Context, cluster, name string, configMaps ...string) error {
	return s.transport.Apply(ctx, NewWork(cluster, name, configMaps...))
}

// Delete publishes the deletion of a work.
func (s *Source) Delete(ctx context.Context, cluster, name string) error {
	return s.transport.Delete(ctx, cluster, name)
}

// Work returns what the transport holds of a work.
func (s *Source) Work(ctx context.Context, cluster, name string) (WorkState, error) {
	w, err := s.transport.Get(ctx, cluster, name)
	if apierrors.IsNotFound(err) {
		return WorkState{}, nil
	}
	if err != nil {
		return WorkState{}, err
	}
	return StateOf(w), nil
}
