// Package store keeps the server's consumers and resources (works) in PostgreSQL and carries change
// notifications between server instances that share one database. It is the only
// package that speaks SQL; it knows nothing of gRPC, CloudEvents or HTTP.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors that callers classify with errors.Is; each returned error names the object it is about.
var (
	// ErrNotFound: the resource or consumer does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConsumerNotFound: the consumer a resource or subscription names is not registered.
	ErrConsumerNotFound = errors.New("consumer not registered")
	// ErrStale: the event carries a version or sequence that is older than the stored one.
	ErrStale = errors.New("stale")
	// ErrForbidden: the resource belongs to another source or consumer.
	ErrForbidden = errors.New("forbidden")
	// ErrDeleting: the resource is marked for deletion and cannot be changed.
	ErrDeleting = errors.New("being deleted")
	// ErrConflict: the object already exists, or still has dependants.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request is malformed.
	ErrInvalid = errors.New("invalid")
)

// Consumer is a registered managed cluster.
type Consumer struct {
	ID        string
	Name      string
	Labels    map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
	// ConnectedAgents counts the agent subscriptions of the consumer open on the live instances (read only).
	ConnectedAgents int
}

// SpecOp is what a source asks for a resource.
type SpecOp int

// The spec operations of the protocol.
const (
	OpCreate SpecOp = iota
	OpUpdate
	OpDelete
)

// SpecWrite is one spec event from a source.
type SpecWrite struct {
	ID       string
	Consumer string
	Source   string
	Name     string
	// Version is the source's version of the spec; 0 lets the server number the versions.
	Version int64
	// Meta is the work's ObjectMeta as JSON.
	Meta []byte
	// Spec is the ManifestBundle as JSON; empty for OpDelete.
	Spec []byte
	// Hash identifies Meta+Spec, so that a resent spec is recognised as identical.
	Hash string
	Op   SpecOp
}

// SpecRow is a resource's current spec as sent to agents.
type SpecRow struct {
	ID        string
	Consumer  string
	Source    string
	Name      string
	Version   int64
	Meta      []byte
	Spec      []byte
	DeletedAt *time.Time
}

// SpecVersion is what an agent's resync compares of a resource: its version, and whether it is being deleted.
type SpecVersion struct {
	ID       string
	Version  int64
	Deleting bool
}

// SpecResult is the outcome of one SpecWrite. Send is set when the row must go to its agent now: a new
// version was committed, or an identical spec was resent while its status is still missing. Gone is set
// when a delete named a resource that does not exist (any more): its source is told it is gone.
type SpecResult struct {
	Err  error
	Send bool
	Gone bool
	Row  SpecRow
}

// StatusWrite is one status event from an agent.
type StatusWrite struct {
	ID       string
	Consumer string
	Version  int64
	Sequence int64
	Hash     string
	// Status is the ManifestBundleStatus as JSON.
	Status []byte
	// Deleted is set when the status reports the manifests deleted from the cluster.
	Deleted bool
}

// StatusRow is a resource's latest status as sent to its source. Removed is set for the final status of a
// resource whose deletion the agent confirmed: the row is gone and Status is empty.
type StatusRow struct {
	ID       string
	Consumer string
	Source   string
	Version  int64
	Sequence int64
	Hash     string
	Status   []byte
	Removed  bool
}

// StatusOutcome says what a status write did.
type StatusOutcome int

// Status outcomes.
const (
	// StatusApplied: the status was newer and different, and is now stored.
	StatusApplied StatusOutcome = iota
	// StatusIdentical: the stored status is the same; nothing changed.
	StatusIdentical
	// StatusRemoved: the agent confirmed a deletion; the row is removed.
	StatusRemoved
)

// StatusResult is the outcome of one StatusWrite.
type StatusResult struct {
	Err     error
	Outcome StatusOutcome
	Row     StatusRow
}

// HashRow is a resource id with the hash of its stored status (empty when it has none).
type HashRow struct {
	ID   string
	Hash string
}

// BundleQuery selects resources for the REST list. Filters are exact matches; empty means any.
type BundleQuery struct {
	Source   string
	Consumer string
	Name     string
	// After continues a keyset walk after this id; Offset is used when After is empty.
	After  string
	Offset int
	Limit  int
	// WithoutSpec leaves the specs (the manifests) out of the page: Bundle.Spec is nil. A controller rebuilding
	// its cache of works needs their metadata and status, not the manifests, the bulk of each row.
	WithoutSpec bool
}

// Bundle is a resource with everything the REST API presents.
type Bundle struct {
	SpecRow
	CreatedAt      time.Time
	UpdatedAt      time.Time
	Status         []byte
	StatusVersion  int64
	StatusSequence int64
	// StatusHash is sdk-go's hash of the status, as its agent reported it (or as the server computed it).
	StatusHash string
}

// BundlePage is one page of bundles and the number of all that match.
type BundlePage struct {
	Items []Bundle
	Total int
}

// Republished is a spec the undelivered sweep published again.
type Republished struct {
	ID       string
	Consumer string
	Version  int64
}

// StuckDelete is a resource marked for deletion longer than the threshold.
type StuckDelete struct {
	ID        string
	Consumer  string
	Source    string
	DeletedAt time.Time
}

// Notification is a change committed by some server instance: a spec for a consumer (KindSpec), a
// status for a source (KindStatus), or a confirmed deletion (KindRemoved, with everything needed to tell
// the source since the row is gone).
type Notification struct {
	Kind     string `json:"k"`
	ID       string `json:"id"`
	Consumer string `json:"c,omitempty"`
	Source   string `json:"s,omitempty"`
	Version  int64  `json:"v,omitempty"`
	Sequence int64  `json:"q,omitempty"`
}

// Notification kinds.
const (
	KindSpec    = "spec"
	KindStatus  = "status"
	KindRemoved = "removed"
)

// Store is the server's persistence.
type Store interface {
	// Migrate applies the embedded migrations that are not applied yet.
	Migrate(ctx context.Context) error
	// Ping checks the database is reachable.
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close()

	CreateConsumer(ctx context.Context, c Consumer) (Consumer, error)
	// EnsureConsumer registers a consumer by name if it is not registered yet.
	EnsureConsumer(ctx context.Context, name string) error
	// GetConsumer finds a consumer by id or name.
	GetConsumer(ctx context.Context, idOrName string) (Consumer, error)
	ListConsumers(ctx context.Context, offset, limit int) ([]Consumer, int, error)
	// DeleteConsumer removes a consumer that has no resources.
	DeleteConsumer(ctx context.Context, idOrName string) error
	// AddAgentSubscription records an agent subscription of a consumer open on this instance, until
	// RemoveAgentSubscription (or the instance's end) forgets it.
	AddAgentSubscription(ctx context.Context, consumer string) (string, error)
	RemoveAgentSubscription(ctx context.Context, id string) error

	// ApplySpecs commits spec events in one transaction and notifies the other instances.
	ApplySpecs(ctx context.Context, writes []SpecWrite, autoRegister bool) ([]SpecResult, error)
	// ApplyStatuses commits status events in one transaction and notifies the other instances.
	ApplyStatuses(ctx context.Context, writes []StatusWrite) ([]StatusResult, error)

	// SpecVersions returns the id, version and deletion of every resource of a consumer, for an agent's resync,
	// which then loads the specs the agent lacks (LoadSpecs).
	SpecVersions(ctx context.Context, consumer string) ([]SpecVersion, error)
	// LoadSpecs returns the resources with the given ids that still exist.
	LoadSpecs(ctx context.Context, ids []string) ([]SpecRow, error)
	// StatusHashes returns the status hash of every resource of a source (of one consumer, when set).
	StatusHashes(ctx context.Context, source, consumer string) ([]HashRow, error)
	// LoadStatuses returns the stored statuses of the given resources that have one.
	LoadStatuses(ctx context.Context, ids []string) ([]StatusRow, error)

	ListBundles(ctx context.Context, q BundleQuery) (BundlePage, error)
	GetBundle(ctx context.Context, id string) (Bundle, error)

	// Listen delivers the notifications of other instances until ctx ends, reconnecting as needed;
	// onConnect runs after every (re)connection, before notifications flow.
	Listen(ctx context.Context, onConnect func(ctx context.Context), onNotify func(ctx context.Context, n []Notification)) error

	// RegisterInstance records this instance as live; Heartbeat keeps it so; RemoveInstance forgets it.
	RegisterInstance(ctx context.Context) error
	Heartbeat(ctx context.Context) error
	RemoveInstance(ctx context.Context) error
	// IsLeader reports whether this instance is the oldest live one (it runs the sweeps).
	IsLeader(ctx context.Context, timeout time.Duration) (bool, error)
	// ReapInstances forgets instances whose heartbeat is older than timeout and returns their ids.
	ReapInstances(ctx context.Context, timeout time.Duration) ([]string, error)
	// LiveInstances counts instances with a recent heartbeat.
	LiveInstances(ctx context.Context, timeout time.Duration) (int, error)

	// RepublishUndelivered marks up to limit specs without a status for their version, last published
	// before olderThan ago, as published now, notifies, and returns them.
	RepublishUndelivered(ctx context.Context, olderThan time.Duration, limit int) ([]Republished, error)
	// CountUndelivered counts specs without a status for their version for longer than olderThan.
	CountUndelivered(ctx context.Context, olderThan time.Duration) (int, error)
	// StuckDeletes counts the resources marked for deletion longer than olderThan and returns up to limit.
	StuckDeletes(ctx context.Context, olderThan time.Duration, limit int) (int, []StuckDelete, error)

	ConsoleRelay
}
