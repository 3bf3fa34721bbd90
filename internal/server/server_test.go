package server

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"

	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

const waitTimeout = 30 * time.Second

func TestCreateUpdateDeleteRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, testOptions(testDB(t), "one"))
	createConsumer(t, s, "cluster1")
	agent := startAgent(t, grpcOptions(s.AgentAddr()), "cluster1")
	source := startSource(t, grpcOptions(s.SourceAddr()), "hub")

	testutil.EventuallyTrue(t, waitTimeout, "the source to accept a create", func() bool {
		_, err := source.works("cluster1").Create(ctx, newWork("cluster1", "app1", "cm-a"), metav1.CreateOptions{})
		return err == nil
	})
	testutil.EventuallyTrue(t, waitTimeout, "the Applied status of version 1 at the source", func() bool {
		return appliedMessage(source, "cluster1", "app1") == "cm-a"
	})
	if got := agent.work("app1"); got == nil || got.Generation != 1 || got.Labels["app"] != "app1" {
		t.Fatalf("agent's work: %+v", got)
	}

	if _, err := source.works("cluster1").Patch(ctx, "app1", kubetypes.MergePatchType, manifestsPatch(t, "cm-a", "cm-b"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the status of the update at the source", func() bool {
		return appliedMessage(source, "cluster1", "app1") == "cm-a,cm-b"
	})
	if got := agent.work("app1"); got.Generation != 2 {
		t.Fatalf("agent's work generation %d, want 2", got.Generation)
	}

	if err := source.works("cluster1").Delete(ctx, "app1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "the work to leave the agent and the source", func() bool {
		return agent.work("app1") == nil && source.work("cluster1", "app1") == nil
	})
	testutil.EventuallyTrue(t, waitTimeout, "the row to be removed", func() bool {
		_, err := s.store.GetBundle(ctx, string(works2UID("hub", "cluster1", "app1")))
		return err != nil
	})
}
