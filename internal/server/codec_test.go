package server

import (
	"testing"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	sourcecodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// TestStoredStatusHashIsTheSourcesHash: the hash the server stores with a status, the one it compares with a
// source's on resync, is the hash sdk-go's source computes over the status it decodes from the server's
// status event, whether the agent sent its own hash (sdk-go's agent does, over the same status) or not.
func TestStoredStatusHashIsTheSourcesHash(t *testing.T) {
	work := benchWork(t, "cluster1", 1)
	work.Status = realisticStatus(work, 3)
	statusType := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceStatus, Action: types.UpdateRequestAction}
	for _, c := range []struct {
		name      string
		agentHash bool
	}{{"with the agent's hash", true}, {"without it", false}} {
		t.Run(c.name, func(t *testing.T) {
			evt, err := agentcodec.NewManifestBundleCodec().Encode("cluster1-agent", statusType, work)
			if err != nil {
				t.Fatal(err)
			}
			if !c.agentHash {
				evt.SetExtension(types.ExtensionStatusHash, nil)
			}
			w, err := decodeStatus(evt)
			if err != nil {
				t.Fatal(err)
			}
			out := statusEvent(store.StatusRow{ID: w.ID, Consumer: w.Consumer, Source: "hub", Version: w.Version,
				Sequence: w.Sequence, Hash: w.Hash, Status: w.Status}, types.ResyncResponseAction)
			received, err := sourcecodec.NewManifestBundleCodec().Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			sourceHash, err := statushash.StatusHash(received)
			if err != nil {
				t.Fatal(err)
			}
			if w.Hash != sourceHash {
				t.Fatalf("stored hash %s, the source's %s", w.Hash, sourceHash)
			}
			if received.Annotations[common.CloudEventsSequenceIDAnnotationKey] == "" || received.Generation != 1 {
				t.Fatalf("the source got sequence %q and generation %d", received.Annotations[common.CloudEventsSequenceIDAnnotationKey], received.Generation)
			}
		})
	}
}
