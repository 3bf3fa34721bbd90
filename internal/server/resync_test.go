package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// applied creates works through the source and waits until the source holds their Applied status.
func applied(t *testing.T, source *testSource, cluster string, names ...string) {
	t.Helper()
	for _, name := range names {
		testutil.EventuallyTrue(t, waitTimeout, "the source to accept "+name, func() bool {
			_, err := source.works(cluster).Create(context.Background(), newWork(cluster, name, "cm-"+name), metav1.CreateOptions{})
			return err == nil
		})
	}
	for _, name := range names {
		testutil.EventuallyTrue(t, waitTimeout, "the Applied status of "+name, func() bool {
			return appliedMessage(source, cluster, name) == "cm-"+name
		})
	}
}

// TestTwoInstances runs the source on one instance and the agent on another: specs and statuses cross
// through the database's notifications.
func TestTwoInstances(t *testing.T) {
	ctx := context.Background()
	db := testDB(t)
	a := startServer(t, testOptions(db, "a"))
	b := startServer(t, testOptions(db, "b"))
	createConsumer(t, a, "cluster1")
	agent := startAgent(t, grpcOptions(b.AgentAddr()), "cluster1")
	source := startSource(t, grpcOptions(a.SourceAddr()), "hub")

	applied(t, source, "cluster1", "app1")
	if _, err := source.works("cluster1").Patch(ctx, "app1", kubetypes.MergePatchType, manifestsPatch(t, "cm-x"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the update's status at the source", func() bool {
		return appliedMessage(source, "cluster1", "app1") == "cm-x"
	})
	if err := source.works("cluster1").Delete(ctx, "app1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the work to leave the agent and the source", func() bool {
		return agent.work("app1") == nil && source.work("cluster1", "app1") == nil
	})
	if n, err := a.store.LiveInstances(ctx, a.opts.InstanceTimeout); err != nil || n != 2 {
		t.Fatalf("live instances %d (%v), want 2", n, err)
	}
}

// TestResyncAfterServerRestart stops the agent's instance while the source, on another instance, updates,
// creates and deletes works, and a resource the agent holds disappears from the database. When the
// instance is back, the agent's resync brings exactly the current state. The agent reconnects, so it runs
// in its own process.
func TestResyncAfterServerRestart(t *testing.T) {
	ctx := context.Background()
	db := testDB(t)
	a := startServer(t, testOptions(db, "a"))
	b := startServer(t, testOptions(db, "b"))
	createConsumer(t, a, "cluster1")
	agent := startRemoteAgent(t, b.AgentAddr(), "cluster1")
	source := startSource(t, grpcOptions(a.SourceAddr()), "hub")
	applied(t, source, "cluster1", "keep", "update", "delete", "vanish")

	b.Stop()
	if _, err := source.works("cluster1").Patch(ctx, "update", kubetypes.MergePatchType, manifestsPatch(t, "cm-new"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := source.works("cluster1").Create(ctx, newWork("cluster1", "create", "cm-create"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := source.works("cluster1").Delete(ctx, "delete", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removeRow(t, a, works2UID("hub", "cluster1", "vanish"))

	startServer(t, restartOptions(b))
	testutil.EventuallyTrue(t, waitTimeout, "the updated and created works' statuses at the source", func() bool {
		return appliedMessage(source, "cluster1", "update") == "cm-new" && appliedMessage(source, "cluster1", "create") == "cm-create"
	})
	remoteWork(t, agent, "the updated work at the agent", "", "update", appliedAs(2, "cm-new"))
	remoteWork(t, agent, "the deleted work to leave the agent", "", "delete", gone)
	testutil.EventuallyTrue(t, waitTimeout, "the deleted work to leave the source", func() bool { return source.work("cluster1", "delete") == nil })
	remoteWork(t, agent, "the vanished work to leave the agent", "", "vanish", gone)
	remoteWork(t, agent, "the vanished work to leave the agent", "", string(works2UID("hub", "cluster1", "vanish")), gone)
	remoteWork(t, agent, "the untouched work at the agent", "", "keep", appliedAs(1, "cm-keep"))
	if appliedMessage(source, "cluster1", "keep") != "cm-keep" {
		t.Fatal("the untouched work's status was lost at the source")
	}
}

// TestSourceResyncAfterReconnect runs the hub controller's grpc transport (workclient.NewGRPC, in its own
// process since it reconnects) on one instance and the agents of two clusters on another. While the source's
// instance is down, the agents report new statuses, twice for one work, and one confirms a deletion; when the
// instance is back, the transport's resync by status hash, one cluster at a time, brings every changed
// status, the latest one, and the removal. Then the transport itself restarts while a status changes, and the
// new one starts current.
func TestSourceResyncAfterReconnect(t *testing.T) {
	ctx := context.Background()
	db := testDB(t)
	a := startServer(t, testOptions(db, "a"))
	b := startServer(t, testOptions(db, "b"))
	createConsumer(t, a, "cluster1", "cluster2")
	agent := startAgent(t, grpcOptions(b.AgentAddr()), "cluster1")
	agent2 := startAgent(t, grpcOptions(b.AgentAddr()), "cluster2")
	source := startRemoteSource(t, a, "hub")
	works := [][2]string{{"cluster1", "keep"}, {"cluster1", "change"}, {"cluster1", "twice"}, {"cluster1", "gone"},
		{"cluster2", "keep"}, {"cluster2", "change"}}
	for _, w := range works {
		testutil.EventuallyTrue(t, waitTimeout, "the source to publish "+w[0]+"/"+w[1], func() bool {
			return source.Apply(ctx, w[0], w[1], "cm-"+w[1]) == nil
		})
	}
	for _, w := range works {
		remoteWork(t, source, "the first status at the source", w[0], w[1], appliedAs(1, "cm-"+w[1]))
	}
	agent.HoldDeletes(true)
	if err := source.Delete(ctx, "cluster1", "gone"); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the agent to get the deletion", func() bool {
		w := agent.work("gone")
		return w != nil && !w.DeletionTimestamp.IsZero()
	})

	a.Stop()
	agent.SetMessage("change", "changed")
	agent2.SetMessage("change", "changed in cluster2")
	agent.SetMessage("twice", "first")
	testutil.EventuallyTrue(t, waitTimeout, "the first new status of twice to be stored", func() bool { return storedStatusHas(b, "cluster1", "twice", "first") })
	agent.SetMessage("twice", "second")
	agent.HoldDeletes(false)
	testutil.EventuallyTrue(t, waitTimeout, "the new statuses to be stored and the deletion completed", func() bool {
		_, err := b.store.GetBundle(ctx, string(works2UID("hub", "cluster1", "gone")))
		return storedStatusHas(b, "cluster1", "change", "changed") && storedStatusHas(b, "cluster1", "twice", "second") &&
			storedStatusHas(b, "cluster2", "change", "changed in cluster2") && errors.Is(err, store.ErrNotFound)
	})

	a = startServer(t, restartOptions(a))
	remoteWork(t, source, "the changed status at the source", "cluster1", "change", appliedAs(1, "changed"))
	remoteWork(t, source, "the latest status at the source", "cluster1", "twice", appliedAs(1, "second"))
	remoteWork(t, source, "the work deleted while away to leave the source", "cluster1", "gone", gone)
	remoteWork(t, source, "the untouched work at the source", "cluster1", "keep", appliedAs(1, "cm-keep"))
	remoteWork(t, source, "the changed status of the other cluster", "cluster2", "change", appliedAs(1, "changed in cluster2"))
	remoteWork(t, source, "the other cluster's untouched work", "cluster2", "keep", appliedAs(1, "cm-keep"))

	// The transport restarts (a controller restart): the new one lists from the REST API, then resyncs.
	source.proc.Stop(5 * time.Second)
	agent.SetMessage("keep", "kept")
	testutil.EventuallyTrue(t, waitTimeout, "the status of keep to be stored", func() bool { return storedStatusHas(b, "cluster1", "keep", "kept") })
	restarted := startRemoteSource(t, a, "hub")
	remoteWork(t, restarted, "the status changed while the transport was down", "cluster1", "keep", appliedAs(1, "kept"))
	remoteWork(t, restarted, "the changed status after the restart", "cluster1", "change", appliedAs(1, "changed"))
	remoteWork(t, restarted, "the deleted work after the restart", "cluster1", "gone", gone)
	if err := restarted.Apply(ctx, "cluster1", "twice", "cm-twice", "cm-more"); err != nil {
		t.Fatal(err)
	}
	agent.SetMessage("twice", "")
	remoteWork(t, restarted, "an update after the restart", "cluster1", "twice", appliedAs(2, "cm-twice,cm-more"))
}

// storedStatusHas reports whether the stored status of the source hub's work contains text.
func storedStatusHas(s *Server, cluster, name, text string) bool {
	b, err := s.store.GetBundle(context.Background(), string(works2UID("hub", cluster, name)))
	return err == nil && strings.Contains(string(b.Status), text)
}
