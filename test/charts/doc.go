// Package charts tests the Helm charts of charts/ against real Kubernetes: helm lint and helm template (the
// helm binary, Helm 4) with several values sets, the rendered manifests applied server-side to a real
// kube-apiserver, the values schemas, and the hub and agent charts installed with the Helm library (Helm 3) into
// a loopback hub and managed cluster, whose rendered containers then run as processes of the argocd-pull binary
// built from this tree. No kubelet runs here: kubelet_test.go says what it stands in for.
package charts
