package workclient

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/cache"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
)

// BenchmarkReceiveStatus: the store takes an agent's status of one of its works and tells a handler that reads
// the work's Application from its annotations, as the controller's does; what the controller pays for each
// status event before its reconcile.
func BenchmarkReceiveStatus(b *testing.B) {
	const works = 1000
	ctx := context.Background()
	s := newWorkStore()
	var apps int
	if _, err := s.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if ApplicationKey(obj.(*workv1.ManifestWork)) != "" {
				apps++
			}
		},
	}); err != nil {
		b.Fatal(err)
	}
	s.listDone()
	statuses := make([]*workv1.ManifestWork, works)
	for i := range works {
		if err := s.Add(publishedWork(i)); err != nil {
			b.Fatal(err)
		}
		statuses[i] = reportedWork(i)
		statuses[i].Labels = nil
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		i := n % works
		status := statuses[i]
		status.Annotations = map[string]string{common.CloudEventsSequenceIDAnnotationKey: sequenceID(i, 1+n/works)}
		// Every other status differs from the one before, as an Application's sync goes.
		status.Status.Conditions[0].Message = map[bool]string{false: "Apply manifest work complete", true: "Applied"}[(n/works)%2 == 1]
		if err := s.HandleReceivedResource(ctx, status); err != nil {
			b.Fatal(err)
		}
	}
	if apps == 0 {
		b.Fatal("the handler heard of no Application")
	}
}
