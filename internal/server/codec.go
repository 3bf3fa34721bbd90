package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/bwmarrin/snowflake"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cetypes "github.com/cloudevents/sdk-go/v2/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"

	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/apis/work/v1/validator"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/payload"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	grpcprotocol "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protocol"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// dataType is the one CloudEvents data type the server speaks.
var dataType = payload.ManifestBundleEventDataType

// sequenceIDs numbers the statuses the server makes up itself (final statuses of removed resources).
var sequenceIDs = mustSnowflakeNode()

func mustSnowflakeNode() *snowflake.Node {
	node, err := snowflake.NewNode(1)
	if err != nil {
		panic(fmt.Sprintf("create snowflake node: %v", err))
	}
	return node
}

// sizeLimits are the largest events accepted: resync requests list every resource a client holds, so they
// get their own limit.
type sizeLimits struct {
	event  int
	resync int
}

// decodePublish turns a publish request into a CloudEvent of the manifest bundle data type, rejecting
// oversized and malformed events with a clear status.
func decodePublish(ctx context.Context, req *pbv1.PublishRequest, limits sizeLimits) (*cloudevents.Event, *types.CloudEventsType, error) {
	pb := req.GetEvent()
	if pb == nil {
		return nil, nil, status.Error(codes.InvalidArgument, "the publish request carries no event")
	}
	et, err := types.ParseCloudEventsType(pb.GetType())
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "event %s: %v", pb.GetId(), err)
	}
	limit := limits.event
	if et.Action == types.ResyncRequestAction {
		limit = limits.resync
	}
	if size := proto.Size(pb); size > limit {
		return nil, nil, status.Errorf(codes.ResourceExhausted, "event %s of %d bytes exceeds the limit of %d bytes", pb.GetId(), size, limit)
	}
	if et.CloudEventsDataType != dataType {
		return nil, nil, status.Errorf(codes.InvalidArgument, "event %s has data type %s; only %s is served", pb.GetId(), et.CloudEventsDataType, dataType)
	}
	evt, err := binding.ToEvent(ctx, grpcprotocol.NewMessage(pb))
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "decode event %s: %v", pb.GetId(), err)
	}
	if err := evt.Validate(); err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "event %s: %v", pb.GetId(), err)
	}
	return evt, et, nil
}

func invalid(evt *cloudevents.Event, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "event %s: %s", evt.ID(), fmt.Sprintf(format, args...))
}

// stringExtension returns a required, non-empty string extension.
func stringExtension(evt *cloudevents.Event, name string) (string, error) {
	v, ok := evt.Extensions()[name]
	if !ok {
		return "", invalid(evt, "missing extension %s", name)
	}
	s, err := cetypes.ToString(v)
	if err != nil || s == "" {
		return "", invalid(evt, "extension %s must be a non-empty string", name)
	}
	return s, nil
}

func versionExtension(evt *cloudevents.Event) (int64, error) {
	v, ok := evt.Extensions()[types.ExtensionResourceVersion]
	if !ok {
		return 0, invalid(evt, "missing extension %s", types.ExtensionResourceVersion)
	}
	n, err := cetypes.ToInteger(v)
	if err != nil || n < 0 {
		return 0, invalid(evt, "extension %s must be a non-negative integer", types.ExtensionResourceVersion)
	}
	return int64(n), nil
}

var specOps = map[types.EventAction]store.SpecOp{
	types.CreateRequestAction: store.OpCreate,
	types.UpdateRequestAction: store.OpUpdate,
	types.DeleteRequestAction: store.OpDelete,
}

// decodeSpec turns a source's spec event into a store write.
func decodeSpec(evt *cloudevents.Event, action types.EventAction) (store.SpecWrite, error) {
	op, ok := specOps[action]
	if !ok {
		return store.SpecWrite{}, invalid(evt, "unsupported spec action %s", action)
	}
	w := store.SpecWrite{Source: evt.Source(), Op: op}
	var err error
	if w.ID, err = stringExtension(evt, types.ExtensionResourceID); err != nil {
		return w, err
	}
	if w.Consumer, err = stringExtension(evt, types.ExtensionClusterName); err != nil {
		return w, err
	}
	if w.Version, err = versionExtension(evt); err != nil {
		return w, err
	}
	if w.Meta, w.Name, err = decodeMeta(evt, w.ID); err != nil {
		return w, err
	}
	if op != store.OpDelete {
		if w.Spec, err = decodeBundle(evt); err != nil {
			return w, err
		}
	}
	w.Hash = specHash(w.Meta, w.Spec)
	return w, nil
}

// decodeMeta returns the work's metadata extension and the name in it (the resource id when unnamed).
func decodeMeta(evt *cloudevents.Event, id string) ([]byte, string, error) {
	raw, ok := evt.Extensions()[types.ExtensionWorkMeta]
	if !ok {
		return []byte("{}"), id, nil
	}
	s, err := cetypes.ToString(raw)
	if err != nil {
		return nil, "", invalid(evt, "extension %s must be a string", types.ExtensionWorkMeta)
	}
	var m metav1.ObjectMeta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, "", invalid(evt, "extension %s is not object metadata: %v", types.ExtensionWorkMeta, err)
	}
	if m.Name == "" {
		m.Name = id
	}
	return []byte(s), m.Name, nil
}

func decodeBundle(evt *cloudevents.Event) ([]byte, error) {
	data := evt.Data()
	var bundle payload.ManifestBundle
	if err := json.Unmarshal(data, &bundle); err != nil {
		return nil, invalid(evt, "data is not a manifest bundle: %v", err)
	}
	if err := validator.ManifestValidator.ValidateManifests(bundle.Manifests); err != nil {
		return nil, invalid(evt, "invalid manifests: %v", err)
	}
	return data, nil
}

func specHash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = h.Write(p)
		_, _ = h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// decodeStatus turns an agent's status event into a store write.
func decodeStatus(evt *cloudevents.Event) (store.StatusWrite, error) {
	var w store.StatusWrite
	var err error
	if w.ID, err = stringExtension(evt, types.ExtensionResourceID); err != nil {
		return w, err
	}
	if w.Consumer, err = stringExtension(evt, types.ExtensionClusterName); err != nil {
		return w, err
	}
	if w.Version, err = versionExtension(evt); err != nil {
		return w, err
	}
	seq, err := stringExtension(evt, types.ExtensionStatusUpdateSequenceID)
	if err != nil {
		return w, err
	}
	if w.Sequence, err = strconv.ParseInt(seq, 10, 64); err != nil {
		return w, invalid(evt, "sequence id %q is not a snowflake id", seq)
	}
	var st payload.ManifestBundleStatus
	if err := json.Unmarshal(evt.Data(), &st); err != nil {
		return w, invalid(evt, "data is not a manifest bundle status: %v", err)
	}
	w.Status = evt.Data()
	w.Deleted = meta.IsStatusConditionTrue(st.Conditions, common.ResourceDeleted)
	if w.Hash, err = eventStatusHash(evt, &st); err != nil {
		return w, err
	}
	return w, nil
}

// eventStatusHash is the status hash the agent computed, or the same hash computed here when it sent none;
// it is what a source compares on resync.
func eventStatusHash(evt *cloudevents.Event, st *payload.ManifestBundleStatus) (string, error) {
	if raw, ok := evt.Extensions()[types.ExtensionStatusHash]; ok {
		if h, err := cetypes.ToString(raw); err == nil && h != "" {
			return h, nil
		}
	}
	work := &workv1.ManifestWork{Status: workv1.ManifestWorkStatus{
		Conditions:     st.Conditions,
		ResourceStatus: workv1.ManifestResourceStatus{Manifests: st.ResourceStatus},
	}}
	h, err := statushash.StatusHash(work)
	if err != nil {
		return "", invalid(evt, "hash status: %v", err)
	}
	return h, nil
}

// specEvent is the event that carries a resource's spec (or its deletion) to its agent.
func specEvent(row store.SpecRow) *cloudevents.Event {
	action := types.UpdateRequestAction
	if row.DeletedAt != nil {
		action = types.DeleteRequestAction
	}
	et := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceSpec, Action: action}
	evt := types.NewEventBuilder(row.Source, et).
		WithResourceID(row.ID).
		WithResourceVersion(row.Version).
		WithClusterName(row.Consumer).
		NewEvent()
	evt.SetExtension(types.ExtensionWorkMeta, string(row.Meta))
	if row.DeletedAt != nil {
		evt.SetExtension(types.ExtensionDeletionTimestamp, *row.DeletedAt)
		return &evt
	}
	_ = evt.SetData(cloudevents.ApplicationJSON, row.Spec)
	return &evt
}

// goneSpecEvent deletes, on an agent, a resource the server no longer has. As sdk-go's source client does,
// it carries the agent's own version, since the server knows nothing more of it.
func goneSpecEvent(id, cluster string, version int64) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceSpec, Action: types.DeleteRequestAction}
	evt := types.NewEventBuilder(cluster, et).
		WithResourceID(id).
		WithResourceVersion(version).
		WithClusterName(cluster).
		WithDeletionTimestamp(time.Now()).
		NewEvent()
	return &evt
}

// statusEvent is the event that carries a resource's status to its source.
func statusEvent(row store.StatusRow, action types.EventAction) *cloudevents.Event {
	et := types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceStatus, Action: action}
	evt := types.NewEventBuilder(row.Consumer, et).
		WithResourceID(row.ID).
		WithResourceVersion(row.Version).
		WithStatusUpdateSequenceID(strconv.FormatInt(row.Sequence, 10)).
		WithClusterName(row.Consumer).
		WithOriginalSource(row.Source).
		NewEvent()
	evt.SetExtension(types.ExtensionStatusHash, row.Hash)
	_ = evt.SetData(cloudevents.ApplicationJSON, row.Status)
	return &evt
}

// removedEvent is the final status of a resource that no longer exists: its manifests are deleted.
func removedEvent(n store.Notification) *cloudevents.Event {
	st := payload.ManifestBundleStatus{Conditions: []metav1.Condition{{
		Type:               common.ResourceDeleted,
		Status:             metav1.ConditionTrue,
		Reason:             "ManifestsDeleted",
		Message:            fmt.Sprintf("The manifests are deleted from the cluster %s", n.Consumer),
		LastTransitionTime: metav1.NewTime(time.Now()),
	}}}
	data, _ := json.Marshal(st)
	seq := n.Sequence
	if seq == 0 {
		seq = sequenceIDs.Generate().Int64()
	}
	work := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{UID: kubetypes.UID(n.ID)},
		Status: workv1.ManifestWorkStatus{Conditions: st.Conditions}}
	hash, _ := statushash.StatusHash(work)
	return statusEvent(store.StatusRow{ID: n.ID, Consumer: n.Consumer, Source: n.Source, Version: n.Version,
		Sequence: seq, Hash: hash, Status: data}, types.UpdateRequestAction)
}

// toProto converts a CloudEvent for a gRPC stream.
func toProto(ctx context.Context, evt *cloudevents.Event) (*pbv1.CloudEvent, error) {
	pb := &pbv1.CloudEvent{}
	if err := grpcprotocol.WritePBMessage(ctx, binding.ToMessage(evt), pb); err != nil {
		return nil, fmt.Errorf("encode event for resource %v: %w", evt.Extensions()[types.ExtensionResourceID], err)
	}
	return pb, nil
}
