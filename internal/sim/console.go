package sim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
)

// The simulated console: each simulated cluster opens the console stream on the server's agent endpoint, as a
// real agent does, and answers it from its simulated Argo CD — the tree and managed resources of its simulated
// Applications (each Deployment with a ReplicaSet and a Pod), a cluster info, and the live object of any
// resource in a tree; discovery and everything else is not simulated (404). It measures the hub side of the
// console at fleet scale, not a cluster's Argo CD.

// serveConsole keeps a simulated cluster's console stream open until ctx ends.
func (f *Fleet) serveConsole(ctx context.Context, c *cluster, dialer *grpcoptions.GRPCDialer) {
	var backoff reconnect.Backoff
	for ctx.Err() == nil {
		err := f.consoleSession(ctx, c, dialer)
		if ctx.Err() != nil {
			return
		}
		f.errorsBy.WithLabelValues("console").Inc()
		f.logger.V(2).Info("Simulated console stream lost", "cluster", c.name, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Delay(time.Now())):
		}
	}
}

func (f *Fleet) consoleSession(ctx context.Context, c *cluster, dialer *grpcoptions.GRPCDialer) error {
	conn, err := dialer.Dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := consoleapi.Connect(metadata.AppendToOutgoingContext(ctx, consoleapi.ClusterHeader, c.name), conn, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	send := func(r *consoleapi.Response) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		if req.Cancel {
			continue // a simulated subscription sends nothing after its first answer
		}
		resp := f.consoleAnswer(c, req)
		resp.ID = req.ID
		if err := send(resp); err != nil {
			return err
		}
	}
}

// consoleAnswer answers one request from the simulated cluster's state.
func (f *Fleet) consoleAnswer(c *cluster, req *consoleapi.Request) *consoleapi.Response {
	switch {
	case req.Cache != nil && req.Cache.Op == consoleapi.CacheSubscribe:
		return &consoleapi.Response{Code: http.StatusOK, More: true}
	case req.Cache != nil && req.Cache.Entry == argocd.CacheEntryClusterInfo:
		return gzipAnswer(map[string]any{"serverVersion": "1.33", "connectionState": map[string]any{"status": "Successful"},
			"applicationsCount": len(c.list)})
	case req.Cache != nil:
		a, ok := f.consoleApp(c, req.Cache.Namespace, req.Cache.Name)
		if !ok {
			return &consoleapi.Response{Code: http.StatusForbidden, Message: "not delivered"}
		}
		if req.Cache.Entry == argocd.CacheEntryTree {
			return gzipAnswer(map[string]any{"nodes": simTree(c.name, f.cfg.Argo.resources(&a))})
		}
		return gzipAnswer(simManagedResources(c.name, f.cfg.Argo.resources(&a)))
	case req.Kube != nil:
		return f.consoleKube(c, req.Kube)
	}
	return &consoleapi.Response{Code: http.StatusBadRequest, Message: "empty request"}
}

// consoleApp is a copy of the simulated Application of a namespace and name.
func (f *Fleet) consoleApp(c *cluster, namespace, name string) (app, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sw := range c.list {
		if sw.hasApp && sw.app.name == name && sw.app.namespace == namespace {
			return sw.app, true
		}
	}
	return app{}, false
}

// consoleKube answers a GET of a resource in one of the cluster's simulated trees.
func (f *Fleet) consoleKube(c *cluster, r *consoleapi.KubeRequest) *consoleapi.Response {
	// A namespaced object: .../namespaces/<namespace>/<resource>/<name>.
	parts := strings.Split(strings.Trim(r.Path, "/"), "/")
	if r.Method != http.MethodGet || len(parts) < 6 || parts[len(parts)-4] != "namespaces" {
		return &consoleapi.Response{Code: http.StatusNotFound, Message: "not simulated"}
	}
	name, namespace := parts[len(parts)-1], parts[len(parts)-3]
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sw := range c.list {
		if !sw.hasApp {
			continue
		}
		for _, n := range simTree(c.name, f.cfg.Argo.resources(&sw.app)) {
			if n["name"] == name && n["namespace"] == namespace {
				body, _ := json.Marshal(liveObject(n))
				return &consoleapi.Response{Code: http.StatusOK, ContentType: "application/json", Body: body}
			}
		}
	}
	return &consoleapi.Response{Code: http.StatusForbidden, Message: "not in a delivered Application's tree"}
}

// simTree is the resource tree of a simulated Application's resources: each Deployment has a ReplicaSet and a Pod.
func simTree(cluster string, resources []any) []map[string]any {
	var nodes []map[string]any
	for _, r := range resources {
		e := r.(map[string]any)
		node := map[string]any{"group": e["group"], "version": e["version"], "kind": e["kind"], "namespace": e["namespace"],
			"name": e["name"], "uid": simUID(cluster, e), "health": map[string]any{"status": HealthHealthy}}
		nodes = append(nodes, node)
		if e["kind"] != "Deployment" {
			continue
		}
		rs := map[string]any{"group": "apps", "version": "v1", "kind": "ReplicaSet", "namespace": e["namespace"],
			"name": fmt.Sprint(e["name"], "-5d8f9c7b6"), "parentRefs": []any{ref(node)}}
		rs["uid"] = simUID(cluster, rs)
		pod := map[string]any{"version": "v1", "kind": "Pod", "namespace": e["namespace"], "name": fmt.Sprint(rs["name"], "-x2k4p"),
			"parentRefs": []any{ref(rs)}, "health": map[string]any{"status": HealthHealthy}, "info": []any{map[string]any{"name": "Status Reason", "value": "Running"}}}
		pod["uid"] = simUID(cluster, pod)
		nodes = append(nodes, rs, pod)
	}
	return nodes
}

func ref(n map[string]any) map[string]any {
	return map[string]any{"group": n["group"], "kind": n["kind"], "namespace": n["namespace"], "name": n["name"], "uid": n["uid"]}
}

// simManagedResources is Argo CD's managed resources of a simulated Application: its target and live state.
func simManagedResources(cluster string, resources []any) []map[string]any {
	diffs := make([]map[string]any, 0, len(resources))
	for _, r := range resources {
		e := r.(map[string]any)
		target := map[string]any{"apiVersion": apiVersion(e), "kind": e["kind"], "metadata": map[string]any{"name": e["name"], "namespace": e["namespace"]}}
		live, _ := json.Marshal(liveObject(map[string]any{"group": e["group"], "version": e["version"], "kind": e["kind"],
			"namespace": e["namespace"], "name": e["name"], "uid": simUID(cluster, e)}))
		t, _ := json.Marshal(target)
		diffs = append(diffs, map[string]any{"group": e["group"], "kind": e["kind"], "namespace": e["namespace"], "name": e["name"],
			"targetState": string(t), "liveState": string(live), "normalizedLiveState": string(live), "predictedLiveState": string(t)})
	}
	return diffs
}

// liveObject is the simulated live object of a tree node.
func liveObject(n map[string]any) map[string]any {
	return map[string]any{"apiVersion": apiVersion(n), "kind": n["kind"],
		"metadata": map[string]any{"name": n["name"], "namespace": n["namespace"], "uid": n["uid"],
			"labels": map[string]any{"app.kubernetes.io/instance": n["name"]}},
		"status": map[string]any{"simulated": true}}
}

func apiVersion(n map[string]any) string {
	if g, _ := n["group"].(string); g != "" {
		return g + "/" + fmt.Sprint(n["version"])
	}
	return fmt.Sprint(n["version"])
}

// simUID is a stable UID of a simulated object.
func simUID(cluster string, n map[string]any) string {
	h := fnv.New128a()
	_, _ = fmt.Fprint(h, cluster, "/", n["group"], "/", n["kind"], "/", n["namespace"], "/", n["name"])
	s := fmt.Sprintf("%x", h.Sum(nil))
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

func gzipAnswer(v any) *consoleapi.Response {
	data, err := json.Marshal(v)
	if err != nil {
		return &consoleapi.Response{Code: http.StatusInternalServerError, Message: err.Error()}
	}
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write(data)
	_ = w.Close()
	return &consoleapi.Response{Code: http.StatusOK, Body: b.Bytes()}
}
