package badinput

import (
	"context"
	"io"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/payload"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	grpcprotocol "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protocol"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
)

// catalogueSource is the source ID of the raw events: not the controller's, whose works it would touch.
const catalogueSource = "catalogue"

// eventCase is a bad CloudEvent published to the server, by a source or by cluster1's agent, and the gRPC
// status that client gets.
type eventCase struct {
	kind string
	// agent publishes on the agent endpoint as cluster1's agent; otherwise on the source endpoint.
	agent bool
	// event is the event as published; nil publishes a request without one.
	event   func() *cloudevents.Event
	raw     *pbv1.CloudEvent
	code    codes.Code
	message string
}

func eventCases() []eventCase {
	spec := func(mutate func(e *cloudevents.Event)) func() *cloudevents.Event {
		return func() *cloudevents.Event {
			e := specEvent(cluster, "r1")
			mutate(e)
			return e
		}
	}
	return []eventCase{
		{kind: "publish request without an event", code: codes.InvalidArgument, message: "the publish request carries no event"},
		{kind: "event type that does not parse", raw: &pbv1.CloudEvent{Id: "e1", Source: catalogueSource, SpecVersion: "1.0", Type: "nonsense"},
			code: codes.InvalidArgument, message: "event e1:"},
		{kind: "data type other than manifest bundles", event: spec(func(e *cloudevents.Event) {
			e.SetType("io.example.things.v1.widgets.spec.create_request")
		}), code: codes.InvalidArgument, message: "only io.open-cluster-management.works.v1alpha1.manifestbundles is served"},
		{kind: "event without a resource ID", event: spec(func(e *cloudevents.Event) { e.SetExtension(types.ExtensionResourceID, nil) }),
			code: codes.InvalidArgument, message: "missing extension resourceid"},
		{kind: "event without a cluster name", event: spec(func(e *cloudevents.Event) { e.SetExtension(types.ExtensionClusterName, "") }),
			code: codes.InvalidArgument, message: "extension clustername must be a non-empty string"},
		{kind: "resource version that is no number", event: spec(func(e *cloudevents.Event) { e.SetExtension(types.ExtensionResourceVersion, "many") }),
			code: codes.InvalidArgument, message: "extension resourceversion must be a non-negative integer"},
		{kind: "work metadata that is no JSON", event: spec(func(e *cloudevents.Event) { e.SetExtension(types.ExtensionWorkMeta, "{") }),
			code: codes.InvalidArgument, message: "extension metadata is not object metadata"},
		{kind: "data that is no manifest bundle", event: spec(func(e *cloudevents.Event) { _ = e.SetData(cloudevents.ApplicationJSON, []byte(`[1,2]`)) }),
			code: codes.InvalidArgument, message: "data is not a manifest bundle"},
		{kind: "manifest without a name", event: spec(func(e *cloudevents.Event) {
			_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"manifests":[{"apiVersion":"v1","kind":"ConfigMap"}]}`))
		}), code: codes.InvalidArgument, message: "invalid manifests"},
		{kind: "spec action the server does not know", event: spec(func(e *cloudevents.Event) {
			e.SetType(types.CloudEventsType{CloudEventsDataType: payload.ManifestBundleEventDataType, SubResource: types.SubResourceSpec, Action: "explode"}.String())
		}), code: codes.InvalidArgument, message: "unsupported spec action explode"},
		{kind: "status event on the source endpoint", event: func() *cloudevents.Event {
			e := statusEvent(cluster, "r1", "5")
			e.SetSource(catalogueSource)
			return e
		},
			code: codes.InvalidArgument, message: "sources publish spec events and status resync requests"},
		{kind: "spec event on the agent endpoint", agent: true, event: func() *cloudevents.Event { return specEvent(cluster, "r1") },
			code: codes.InvalidArgument, message: "agents publish status events and spec resync requests"},
		{kind: "status without a sequence ID", agent: true, event: func() *cloudevents.Event {
			e := statusEvent(cluster, "r1", "5")
			e.SetExtension(types.ExtensionStatusUpdateSequenceID, nil)
			return e
		}, code: codes.InvalidArgument, message: "missing extension sequenceid"},
		{kind: "status of a work the server does not have", agent: true, event: func() *cloudevents.Event { return statusEvent(cluster, "no-such-work", "5") },
			code: codes.NotFound},
		{kind: "spec for a cluster the server does not know", event: func() *cloudevents.Event { return specEvent(ghostCluster, "r2") },
			code: codes.NotFound, message: "consumer not registered: consumer ghost of resource r2"},
		{kind: "event over --max-event-bytes", event: spec(func(e *cloudevents.Event) {
			e.SetExtension("padding", strings.Repeat("x", maxEventBytes+1024))
		}), code: codes.ResourceExhausted, message: "exceeds the limit of 262144 bytes"},
		{kind: "message over the gRPC transport's limit", event: spec(func(e *cloudevents.Event) {
			e.SetExtension("padding", strings.Repeat("x", maxResyncBytes+128<<10))
		}), code: codes.ResourceExhausted, message: "larger than max"},
	}
}

// TestCloudEventInputs publishes each bad event over the real server's gRPC endpoints, with the client
// certificates a source and cluster1's agent have, and checks the status the publisher gets; a good event
// is accepted after them all.
func TestCloudEventInputs(t *testing.T) {
	e := fleet(t)
	source := e.rawClient(t, e.Server.Source, "source:"+catalogueSource)
	agent := e.rawClient(t, e.Server.Agent, "agent:"+cluster)
	for _, c := range eventCases() {
		t.Run(strings.ReplaceAll(c.kind, " ", "_"), func(t *testing.T) {
			client := source
			if c.agent {
				client = agent
			}
			pb := c.raw
			if c.event != nil {
				pb = toProto(t, c.event())
			}
			err := publish(client, pb)
			if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.message) {
				t.Errorf("got %v, want %s with %q", err, c.code, c.message)
			}
		})
	}
	if err := publish(source, toProto(t, specEvent(cluster, "r1"))); err != nil {
		t.Errorf("a good event after the bad ones: %v", err)
	}
	// The operator sees the rejections in the server's metrics.
	resp, err := e.ServerClient().HTTPClient().Get("https://" + e.Server.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	metrics, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{`argocd_pull_server_events_rejected_total{code="InvalidArgument",endpoint="source"}`,
		`argocd_pull_server_events_rejected_total{code="InvalidArgument",endpoint="agent"}`} {
		if !strings.Contains(string(metrics), series+" ") {
			t.Errorf("the metrics lack %s", series)
		}
	}
}

// rawClient is a CloudEvents gRPC client of the server with a client certificate for the identity.
func (e *env) rawClient(t *testing.T, addr, identity string) pbv1.CloudEventServiceClient {
	t.Helper()
	certFile, keyFile, err := e.ClientCertificate(identity)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := restapi.TLS{CAFile: e.CAFile(), CertFile: certFile, KeyFile: keyFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pbv1.NewCloudEventServiceClient(conn)
}

func publish(c pbv1.CloudEventServiceClient, pb *pbv1.CloudEvent) error {
	_, err := c.Publish(context.Background(), &pbv1.PublishRequest{Event: pb})
	return err
}

func toProto(t *testing.T, evt *cloudevents.Event) *pbv1.CloudEvent {
	t.Helper()
	pb := &pbv1.CloudEvent{}
	if err := grpcprotocol.WritePBMessage(context.Background(), binding.ToMessage(evt), pb); err != nil {
		t.Fatal(err)
	}
	return pb
}

// specEvent is a source's create request for a work of one ConfigMap, as sdk-go's source client sends it.
func specEvent(cluster, id string) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: payload.ManifestBundleEventDataType, SubResource: types.SubResourceSpec,
		Action: types.CreateRequestAction}
	evt := types.NewEventBuilder(catalogueSource, et).WithResourceID(id).WithResourceVersion(1).WithClusterName(cluster).NewEvent()
	evt.SetExtension(types.ExtensionWorkMeta, `{"name":"catalogue-`+id+`","namespace":"`+cluster+`"}`)
	_ = evt.SetData(cloudevents.ApplicationJSON, map[string]any{"manifests": []any{map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "catalogue-" + id, "namespace": "default"}}}})
	return &evt
}

// statusEvent is an agent's status update of a work, as the work agent sends it.
func statusEvent(cluster, id, seq string) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: payload.ManifestBundleEventDataType, SubResource: types.SubResourceStatus,
		Action: types.UpdateRequestAction}
	evt := types.NewEventBuilder(cluster+"-agent", et).WithResourceID(id).WithResourceVersion(1).
		WithClusterName(cluster).WithStatusUpdateSequenceID(seq).WithOriginalSource(catalogueSource).NewEvent()
	_ = evt.SetData(cloudevents.ApplicationJSON, map[string]any{"conditions": []metav1.Condition{{Type: "Applied",
		Status: metav1.ConditionTrue, Reason: "Applied", Message: seq, LastTransitionTime: metav1.Now()}}})
	return &evt
}
