// Package badinput is the catalogue of bad input: each kind of mistake a user, a client or a misbehaving
// peer can make, fed through the real components — the hub's kube-apiserver and the hub controller for
// Applications, argocd-pull server over gRPC (raw CloudEvents with real client certificates) and over its
// REST API, the server binary for its token file, the OCM work agent and a real Argo CD on a managed
// cluster — with the exact condition or error the user sees. docs/reliability.md lists every kind
// (TestCatalogueIsDocumented keeps the two in step).
package badinput
