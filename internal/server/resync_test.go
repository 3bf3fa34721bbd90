package server

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
)

// applied creates works through the source and waits until the source holds their Applied status.
func applied(t *testing.T, source *testSource, cluster string, names ...string) {
	t.Helper()
	for _, name := range names {
		eventually(t, waitTimeout, "the source to accept "+name, func() bool {
			_, err := source.works(cluster).Create(context.Background(), newWork(cluster, name, "cm-"+name), metav1.CreateOptions{})
			return err == nil
		})
	}
	for _, name := range names {
		eventually(t, waitTimeout, "the Applied status of "+name, func() bool {
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
	eventually(t, waitTimeout, "the update's status at the source", func() bool {
		return appliedMessage(source, "cluster1", "app1") == "cm-x"
	})
	if err := source.works("cluster1").Delete(ctx, "app1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, "the work to leave the agent and the source", func() bool {
		return agent.work("app1") == nil && source.work("cluster1", "app1") == nil
	})
	if n, err := a.store.LiveInstances(ctx, a.opts.InstanceTimeout); err != nil || n != 2 {
		t.Fatalf("live instances %d (%v), want 2", n, err)
	}
}

// TestResyncAfterServerRestart stops the agent's instance while the source, on another instance, updates,
// creates and deletes works, and a resource the agent holds disappears from the database. When the
// instance is back, the agent's resync brings exactly the current state.
func TestResyncAfterServerRestart(t *testing.T) {
	ctx := context.Background()
	db := testDB(t)
	a := startServer(t, testOptions(db, "a"))
	b := startServer(t, testOptions(db, "b"))
	createConsumer(t, a, "cluster1")
	agent := startAgent(t, grpcOptions(b.AgentAddr()), "cluster1")
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
	eventually(t, waitTimeout, "the updated and created works' statuses at the source", func() bool {
		return appliedMessage(source, "cluster1", "update") == "cm-new" && appliedMessage(source, "cluster1", "create") == "cm-create"
	})
	eventually(t, waitTimeout, "the deleted work to leave the agent", func() bool { return agent.work("delete") == nil })
	eventually(t, waitTimeout, "the deleted work to leave the source", func() bool { return source.work("cluster1", "delete") == nil })
	eventually(t, waitTimeout, "the vanished work to leave the agent", func() bool {
		return agent.work("vanish") == nil && agent.work(string(works2UID("hub", "cluster1", "vanish"))) == nil
	})
	if agent.work("keep") == nil || appliedMessage(source, "cluster1", "keep") != "cm-keep" {
		t.Fatal("the untouched work was lost")
	}
}
