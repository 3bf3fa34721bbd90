package hubmanager

import (
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// TestControllersWaitForTheirSources: every controller of the manager waits for its sources to sync for as long as
// they take, not controller-runtime's default of two minutes, after which the process would exit and a new one
// would list everything again.
func TestControllersWaitForTheirSources(t *testing.T) {
	env, err := loopback.Start(t.Context(), loopback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	o := NewOptions()
	o.MetricsAddress, o.HealthAddress = "0", "0"
	mgr, err := newManager(env.Hub.Config(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := mgr.GetControllerOptions().CacheSyncTimeout; got != cacheSyncTimeout {
		t.Errorf("controllers wait %s for their sources, want %s", got, cacheSyncTimeout)
	}
}
