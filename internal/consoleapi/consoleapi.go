// Package consoleapi is the console channel between argocd-pull server and the agents, as both sides see it:
// the gRPC stream an agent opens on the server's agent endpoint (service argocdpull.console.v1.Console, method
// Connect), the requests the hub's console sends down it, and the answers the agent sends back. The hub never
// dials a managed cluster: every request rides the stream the cluster's agent opened, with the agent's own
// credentials. Messages are JSON (content subtype "argocdpull-json"); the package registers that codec.
package consoleapi

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// Service and method names of the console stream.
const (
	ServiceName   = "argocdpull.console.v1.Console"
	ConnectMethod = "/" + ServiceName + "/Connect"
	// codecName is the content subtype of the stream's messages.
	codecName = "argocdpull-json"
	// ClusterHeader names, in the metadata of a console stream, the cluster an agent speaks for. The server
	// reads it only from anonymous agents (--insecure-allow-anonymous): an authenticated agent's cluster is its
	// credential's.
	ClusterHeader = "argocd-pull-cluster"
)

// Request is what the hub asks a managed cluster. Exactly one of Cache, Kube and Cancel is set.
type Request struct {
	// ID identifies the request within its stream; answers carry it.
	ID uint64 `json:"id"`
	// Cache reads Argo CD's cache on the cluster (its redis).
	Cache *CacheRequest `json:"cache,omitempty"`
	// Kube reads the cluster's API.
	Kube *KubeRequest `json:"kube,omitempty"`
	// Cancel ends the streamed answer of the request ID (a followed log, a subscription).
	Cancel bool `json:"cancel,omitempty"`
}

// Cache operations.
const (
	// CacheGet reads one entry.
	CacheGet = "get"
	// CacheSubscribe streams a notification each time the Application's tree changes, until cancelled.
	CacheSubscribe = "subscribe"
)

// CacheRequest reads an entry of Argo CD's cache on the cluster.
type CacheRequest struct {
	// Op is CacheGet or CacheSubscribe.
	Op string `json:"op"`
	// Entry is argocd.CacheEntryTree, argocd.CacheEntryManagedResources or argocd.CacheEntryClusterInfo (the
	// cluster's own info; no Application).
	Entry string `json:"entry"`
	// Namespace and Name are the Application on the managed cluster.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Shard is the shard of a large tree (0 for the first).
	Shard int64 `json:"shard,omitempty"`
}

// KubeRequest is a read of the cluster's API, as argocd-server makes it through a cluster's REST config.
type KubeRequest struct {
	// Method is GET; the agent refuses anything else.
	Method string `json:"method"`
	// Path is the request's path (/api/v1/namespaces/x/pods/y/log, /apis/apps/v1, ...).
	Path string `json:"path"`
	// RawQuery is the query string, without '?'.
	RawQuery string `json:"rawQuery,omitempty"`
	// Accept is the request's Accept header.
	Accept string `json:"accept,omitempty"`
}

// Response is the agent's answer, or one part of a streamed answer.
type Response struct {
	// ID is the request's.
	ID uint64 `json:"id"`
	// Code is an HTTP status code: 200 found, 404 not found (a cache miss too), 403 refused, 400 a bad request,
	// 502 the cluster's API or cache failed.
	Code int `json:"code"`
	// Message says why a request failed.
	Message string `json:"message,omitempty"`
	// ContentType is the body's media type (kube answers).
	ContentType string `json:"contentType,omitempty"`
	// Body is the answer: a cache entry gzip-compressed JSON, a kube answer as the cluster's API sent it (Secret
	// data replaced), a part of a followed log; empty in a subscription's notifications.
	Body []byte `json:"body,omitempty"`
	// More says that more parts of this answer follow (a followed log, a subscription's notifications).
	More bool `json:"more,omitempty"`
}

// jsonCodec marshals the console's messages as JSON.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return codecName }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// Handler serves one agent's console stream on the server: it sends Requests and receives Responses until it
// returns.
type Handler func(stream grpc.ServerStream) error

// Register registers the console service on a gRPC server.
func Register(s *grpc.Server, h Handler) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Connect",
			ServerStreams: true,
			ClientStreams: true,
			Handler:       func(_ any, stream grpc.ServerStream) error { return h(stream) },
		}},
		Metadata: "argocd-pull/console",
	}, nil)
}

// Stream is an agent's end of the console stream.
type Stream interface {
	Recv() (*Request, error)
	Send(*Response) error
	CloseSend() error
}

type clientStream struct{ grpc.ClientStream }

func (s clientStream) Recv() (*Request, error) {
	r := &Request{}
	if err := s.RecvMsg(r); err != nil {
		return nil, err
	}
	return r, nil
}

func (s clientStream) Send(r *Response) error { return s.SendMsg(r) }

// Connect opens the console stream on a connection to the server's agent endpoint.
func Connect(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) (Stream, error) {
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Connect", ServerStreams: true, ClientStreams: true},
		ConnectMethod, append(opts, grpc.CallContentSubtype(codecName))...)
	if err != nil {
		return nil, fmt.Errorf("open console stream: %w", err)
	}
	return clientStream{s}, nil
}
