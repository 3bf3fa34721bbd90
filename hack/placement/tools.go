//go:build tools

// Package tools pins OCM's placement command so that `go mod tidy` keeps its dependencies.
package tools

import _ "open-cluster-management.io/ocm/cmd/placement"
