package server

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// republishBatch bounds how many undelivered specs one sweep publishes again.
const republishBatch = 1000

// stuckLogLimit bounds how many stuck deletes one sweep names in the log.
const stuckLogLimit = 20

// maintain keeps this instance's heartbeat and runs the sweeps until ctx ends: every instance refreshes
// the gauges; the oldest live instance also forgets dead instances and publishes undelivered specs again.
func (s *Server) maintain(ctx context.Context) {
	heartbeat := time.NewTicker(s.opts.InstanceHeartbeatInterval)
	defer heartbeat.Stop()
	sweep := time.NewTicker(s.opts.SweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if err := s.store.Heartbeat(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to heartbeat this instance")
			}
		case <-sweep.C:
			s.sweep(ctx)
		}
	}
}

func (s *Server) sweep(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if err := s.refreshGauges(ctx); err != nil {
		logger.Error(err, "Failed to refresh the delivery gauges")
	}
	leader, err := s.store.IsLeader(ctx, s.opts.InstanceTimeout)
	if err != nil {
		logger.Error(err, "Failed to find the leading instance")
		return
	}
	if !leader {
		return
	}
	gone, err := s.store.ReapInstances(ctx, s.opts.InstanceTimeout)
	if err != nil {
		logger.Error(err, "Failed to forget dead instances")
	}
	for _, id := range gone {
		logger.Info("Forgot a server instance that stopped heartbeating", "deadInstance", id)
	}
	if err := s.republish(ctx); err != nil {
		logger.Error(err, "Failed to publish undelivered specs again")
	}
	if s.console != nil {
		if err := s.store.SweepConsole(ctx, consoleRelayMaxAge); err != nil {
			logger.Error(err, "Failed to sweep the console relay")
		}
	}
}

// consoleRelayMaxAge is how long a relayed console message nobody took is kept.
const consoleRelayMaxAge = 5 * time.Minute

func (s *Server) refreshGauges(ctx context.Context) error {
	live, err := s.store.LiveInstances(ctx, s.opts.InstanceTimeout)
	if err != nil {
		return err
	}
	s.metrics.instances.Set(float64(live))
	undelivered, err := s.store.CountUndelivered(ctx, s.opts.UndeliveredAfter)
	if err != nil {
		return err
	}
	s.metrics.undelivered.Set(float64(undelivered))
	stuck, list, err := s.store.StuckDeletes(ctx, s.opts.StuckDeleteAfter, stuckLogLimit)
	if err != nil {
		return err
	}
	s.metrics.stuckDeletes.Set(float64(stuck))
	for _, d := range list {
		klog.FromContext(ctx).Info("Work deletion is stuck: its agent has not confirmed the manifests are gone",
			"resourceID", d.ID, "consumer", d.Consumer, "source", d.Source, "markedAt", d.DeletedAt, "stuckDeletes", stuck)
	}
	return nil
}

// republish publishes specs that got no status within the undelivered threshold again: the store
// notifies every instance, and this one sends those whose agent is subscribed here.
func (s *Server) republish(ctx context.Context) error {
	list, err := s.store.RepublishUndelivered(ctx, s.opts.UndeliveredAfter, republishBatch)
	if err != nil || len(list) == 0 {
		return err
	}
	s.metrics.republished.Add(float64(len(list)))
	klog.FromContext(ctx).Info("Published undelivered specs again", "count", len(list))
	notes := make([]store.Notification, 0, len(list))
	for _, p := range list {
		notes = append(notes, store.Notification{Kind: store.KindSpec, ID: p.ID, Consumer: p.Consumer, Version: p.Version})
	}
	s.dispatch.notifications(ctx, s.store, notes)
	return nil
}
