//go:build tools

// Package tools pins the KWOK command so that `go mod tidy` keeps its dependencies.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
