package sim

import (
	"errors"
	"fmt"
	"testing"
	"time"

	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestRetryWhileUnreachable: a work whose status could not be published because the server was unreachable is
// tried again within two seconds however often it failed, as the work agent's status controller goes over its
// works again; other failures back off. A 10 s database outage had left statuses waiting 13 s more.
func TestRetryWhileUnreachable(t *testing.T) {
	f, err := NewFleet(Config{Transport: workclient.TransportGRPC, Clusters: []string{"c1"}, Argo: testArgo(),
		GRPC: &grpcoptions.GRPCOptions{Dialer: &grpcoptions.GRPCDialer{URL: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.queue.ShutDown()
	unreachable := fmt.Errorf("report status of work c1/w: Failed to publish resource w: %s",
		"rpc error: code = Unavailable desc = apply 1 status events: acquire a database connection: connection refused")
	for _, tc := range []struct {
		name      string
		err       error
		unreached bool
	}{
		{name: "unreachable", err: unreachable, unreached: true},
		{name: "client not ready", err: errors.New("Failed to publish resource w: the cloudevents client is not ready"), unreached: true},
		{name: "other", err: errors.New("invalid manifest")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key{cluster: 0, work: tc.name}
			for range 10 {
				f.failed(k, tc.err)
			}
			if !tc.unreached {
				if n := f.queue.NumRequeues(k); n != 10 {
					t.Fatalf("%d failures counted for the backoff, want 10", n)
				}
				return
			}
			if n := f.queue.NumRequeues(k); n != 0 {
				t.Fatalf("%d failures counted for a backoff, want none", n)
			}
			start := time.Now()
			got, _ := f.queue.Get()
			f.queue.Done(got)
			if got != k || time.Since(start) > 2*time.Second {
				t.Fatalf("%v came back after %s, want %v within 2s", got, time.Since(start), k)
			}
		})
	}
}
