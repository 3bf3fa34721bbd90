package application

import (
	"testing"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
	workpayload "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/payload"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
)

// BenchmarkPublishWork is what a new work costs the controller in the Maestro mode from its build to the cloud
// event the transport sends: BuildWork, the two copies sdk-go's source client makes (of the work it publishes
// and of the work it returns), its encoding and validation of the manifests, and the event's encoding.
// docs/benchmarks.md compares manifests built as objects and as their encoding by it.
func BenchmarkPublishWork(b *testing.B) {
	app := benchApp()
	c := codec.NewManifestBundleCodec()
	eventType := types.CloudEventsType{CloudEventsDataType: workpayload.ManifestBundleEventDataType,
		SubResource: types.SubResourceSpec, Action: types.CreateRequestAction}
	b.ReportAllocs()
	for b.Loop() {
		built, err := BuildWork(app, BuildOptions{Cluster: "cluster1", WorkName: "w", SpokeArgoCDNamespace: "argocd"})
		if err != nil {
			b.Fatal(err)
		}
		w := built.DeepCopy()
		_ = w.DeepCopy()
		w.UID, w.Generation, w.ResourceVersion = "0f8ac9d6-3b1e-5e0e-9c5e-2d6b0d1f3a11", 1, "1"
		if err := utils.EncodeManifests(w); err != nil {
			b.Fatal(err)
		}
		if errs := utils.ValidateWork(w); len(errs) > 0 {
			b.Fatal(errs)
		}
		evt, err := c.Encode("hub", eventType, w)
		if err != nil {
			b.Fatal(err)
		}
		if len(evt.Data()) == 0 {
			b.Fatal("an event without data")
		}
	}
}
