package loopback

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
)

// startPlacementController runs OCM's placement controller (bin/placement, built from hack/placement) against the
// cluster, as OCM's cluster manager runs it on a hub: the Placements there are decided by OCM, which writes their
// PlacementDecisions from the ManagedClusters, ManagedClusterSets and ManagedClusterSetBindings it finds.
func (c *Cluster) startPlacementController(ctx context.Context) error {
	bin, err := Binary("placement")
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	proc, err := StartProcess(ProcessSpec{
		Name: "placement-" + c.Name, Path: bin,
		// --namespace: the controller runs outside a pod, where it cannot detect its namespace.
		Args: []string{"controller", "--kubeconfig=" + c.Kubeconfig, "--disable-leader-election",
			"--listen=" + listen, "--namespace=open-cluster-management-hub", "--v=1"},
		Dir:     c.Dir,
		LogPath: filepath.Join(c.Dir, "logs", "placement.log"),
	})
	if err != nil {
		return err
	}
	c.extra = append(c.extra, proc)
	// It serves /healthz with a self-signed certificate it generates at start.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness probe of our own loopback process
	if err := proc.WaitReady(ctx, func(ctx context.Context) error {
		return httpOK(ctx, insecure, "https://"+listen+"/healthz", "")
	}); err != nil {
		return fmt.Errorf("start OCM's placement controller on %s: %w", c.Name, err)
	}
	return nil
}
