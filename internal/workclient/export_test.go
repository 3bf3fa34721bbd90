package workclient

import workv1 "open-cluster-management.io/api/work/v1"

// EarlyStatuses counts the statuses the transport keeps for works not stored yet.
func EarlyStatuses(g *GRPC) int {
	g.store.mu.RLock()
	defer g.store.mu.RUnlock()
	return len(g.store.early.items)
}

// ForgetEarlyStatuses drops the statuses kept for works not stored yet, as their time to live does.
func ForgetEarlyStatuses(g *GRPC) {
	g.store.mu.Lock()
	defer g.store.mu.Unlock()
	g.store.early = newRecentByUID[*workv1.ManifestWork](earlyStatusTTL)
}

// NewStuckBackoff, Due and Retry expose stuckBackoff.
func NewStuckBackoff(maxTicks int) *stuckBackoff    { return newStuckBackoff(maxTicks) }
func (b *stuckBackoff) Due(stuck []string) []string { return b.due(stuck) }
func (b *stuckBackoff) Retry(cluster string)        { b.retry(cluster) }
