package workclient

import (
	"fmt"

	ocmfeature "open-cluster-management.io/api/feature"
	"open-cluster-management.io/ocm/pkg/features"
)

// Raw-JSON feedback limits of the two transports, for the work agent (internal/agent) and the simulator. The
// hub's ManifestWork CRD caps a raw value at 1024 characters, so the kube transport cannot carry more: larger
// status sections stay on the managed cluster and the hub shows the scalar fields. Over gRPC the limit is the
// server's event size; 1 MiB holds any Application status.
const (
	KubeMaxJSONRawLength = 1024
	GRPCMaxJSONRawLength = 1024 * 1024
)

// MaxJSONRawLength is the raw-JSON feedback limit of a transport.
func MaxJSONRawLength(transport string) int32 {
	if transport == TransportGRPC {
		return GRPCMaxJSONRawLength
	}
	return KubeMaxJSONRawLength
}

// EnableRawFeedback turns on the OCM work agent's raw-JSON feedback: a process-wide feature gate, set the same
// way by `argocd-pull agent` and the simulator (registering the gates again is allowed).
func EnableRawFeedback() error {
	if err := features.SpokeMutableFeatureGate.Add(ocmfeature.DefaultSpokeWorkFeatureGates); err != nil {
		return fmt.Errorf("register work agent feature gates: %w", err)
	}
	if err := features.SpokeMutableFeatureGate.Set(string(ocmfeature.RawFeedbackJsonString) + "=true"); err != nil {
		return fmt.Errorf("enable raw feedback: %w", err)
	}
	return nil
}
