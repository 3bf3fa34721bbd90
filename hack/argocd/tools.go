//go:build tools

// Package tools pins the Argo CD command so that `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/argoproj/argo-cd/v3/cmd"
