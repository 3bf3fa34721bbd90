// Package restapi is the Maestro-compatible REST API of argocd-pull server as both sides see it: its paths and
// JSON shapes (the server renders them), and a Go client with its TLS and token set-up (the `server consumers`
// commands, the hub controller's list after a start, the local fleet and the tests call the server through it).
// It owns no server logic: the server's handlers stay in internal/server, which imports this package and not
// the other way round.
package restapi

import (
	"encoding/json"
	"regexp"
	"time"
)

// BasePath is the prefix of Maestro's REST API.
const BasePath = "/api/maestro/v1"

// Paths of the collections under BasePath.
const (
	ConsumersPath       = BasePath + "/consumers"
	ResourceBundlesPath = BasePath + "/resource-bundles"
)

// The REST API's JSON shapes, as in Maestro's openapi.

// List is the envelope of every list.
type List[T any] struct {
	Kind  string `json:"kind"`
	Page  int    `json:"page"`
	Size  int    `json:"size"`
	Total int    `json:"total"`
	Items []T    `json:"items"`
}

// Consumer is a consumer: a managed cluster known to the server.
type Consumer struct {
	ID        string            `json:"id,omitempty"`
	Kind      string            `json:"kind,omitempty"`
	Href      string            `json:"href,omitempty"`
	Name      string            `json:"name,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt *time.Time        `json:"created_at,omitempty"`
	UpdatedAt *time.Time        `json:"updated_at,omitempty"`
	// ConnectedAgents counts the agents of the consumer subscribed to the server's instances (an extension of
	// Maestro's shape, read only; nil from a server that does not tell).
	ConnectedAgents *int `json:"connected_agents,omitempty"`
}

// ResourceBundle is a resource bundle: one work's spec and status.
type ResourceBundle struct {
	ID           string          `json:"id"`
	Kind         string          `json:"kind"`
	Href         string          `json:"href"`
	Name         string          `json:"name"`
	ConsumerName string          `json:"consumer_name"`
	Version      int64           `json:"version"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	DeletedAt    *time.Time      `json:"deleted_at,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	// Manifests, DeleteOption and ManifestConfigs are the spec's, as the source sent them.
	Manifests       json.RawMessage `json:"manifests,omitempty"`
	DeleteOption    json.RawMessage `json:"delete_option,omitempty"`
	ManifestConfigs json.RawMessage `json:"manifest_configs,omitempty"`
	// Status is the status the agent reported, each field as it sent it, with the server's ObservedVersion and
	// SequenceID.
	Status map[string]json.RawMessage `json:"status,omitempty"`
}

// Error is Maestro's error shape.
type Error struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Href   string `json:"href"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// consumerName is what a consumer name must look like: a DNS label, as cluster names are.
var consumerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// IsConsumerName reports whether name may name a consumer.
func IsConsumerName(name string) bool { return consumerName.MatchString(name) }
