//go:build tools

// Package tools pins the kube-apiserver, kube-controller-manager and kubectl commands so that `go mod tidy`
// keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
