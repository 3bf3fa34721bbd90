// Package internal pins module versions that the code imports only in parts still being written, so that
// `go mod tidy` keeps them at the checked versions (see ../shared/RECIPES.md). Removed once every pin is
// imported for real.
package internal

import (
	_ "open-cluster-management.io/ocm/pkg/work/spoke"
	_ "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	_ "open-cluster-management.io/sdk-go/pkg/cloudevents/server/grpc"
	_ "sigs.k8s.io/controller-runtime"
)
