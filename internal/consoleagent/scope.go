package consoleagent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	workclientset "open-cluster-management.io/api/client/work/clientset/versioned"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/resp"
)

// The scope is how long what it read is trusted, and how soon a miss may read again.
const (
	scopeFresh   = 10 * time.Second
	scopeReread  = time.Second
	maxTreeBytes = 64 << 20
)

// app is an Application on the managed cluster.
type app struct{ namespace, name string }

// scope knows what the console may answer for: the Applications this cluster's work agent delivered (the
// argoproj.io applications its AppliedManifestWorks list), and the resources in their trees, by UID — the tree
// Argo CD computed, with every child (a Deployment's ReplicaSets and Pods). It reads both on demand and holds
// them briefly.
type scope struct {
	agentID, argoNamespace string
	works                  workclientset.Interface
	redis                  *resp.Client

	mu        sync.Mutex
	apps      map[app]bool
	appsRead  time.Time
	index     map[types.UID]app
	indexRead time.Time
}

func newScope(agentID, argoNamespace string, works workclientset.Interface, redis *resp.Client) *scope {
	return &scope{agentID: agentID, argoNamespace: argoNamespace, works: works, redis: redis}
}

// delivered reports whether the work agent delivered an Application.
func (s *scope) delivered(ctx context.Context, a app) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apps == nil || time.Since(s.appsRead) > scopeFresh || (!s.apps[a] && time.Since(s.appsRead) > scopeReread) {
		if err := s.readApps(ctx); err != nil {
			return false, err
		}
	}
	return s.apps[a], nil
}

// readApps lists the AppliedManifestWorks of this agent. Call with mu held.
func (s *scope) readApps(ctx context.Context) error {
	list, err := s.works.WorkV1().AppliedManifestWorks().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list appliedmanifestworks: %w", err)
	}
	apps := map[app]bool{}
	for _, w := range list.Items {
		if s.agentID != "" && w.Spec.AgentID != s.agentID {
			continue
		}
		for _, r := range w.Status.AppliedResources {
			if r.Group == argocd.Group && r.Resource == "applications" {
				apps[app{namespace: r.Namespace, name: r.Name}] = true
			}
		}
	}
	s.apps, s.appsRead = apps, time.Now()
	return nil
}

// owner is the delivered Application whose tree holds a resource, by the resource's UID.
func (s *scope) owner(ctx context.Context, uid types.UID) (app, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.index[uid]; ok && time.Since(s.indexRead) < scopeFresh {
		return a, true, nil
	}
	if s.index != nil && time.Since(s.indexRead) < scopeReread {
		return app{}, false, nil
	}
	if err := s.readApps(ctx); err != nil {
		return app{}, false, err
	}
	index := map[types.UID]app{}
	for a := range s.apps {
		nodes, err := s.treeNodes(ctx, a)
		if err != nil {
			return app{}, false, err
		}
		for _, n := range nodes {
			index[n.UID] = a
		}
	}
	s.index, s.indexRead = index, time.Now()
	a, ok := index[uid]
	return a, ok, nil
}

// treeNode is what the console reads of a node of Argo CD's resource tree.
type treeNode struct {
	Group     string    `json:"group"`
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

type tree struct {
	Nodes         []treeNode `json:"nodes"`
	OrphanedNodes []treeNode `json:"orphanedNodes"`
	ShardsCount   int64      `json:"shardsCount"`
}

// treeNodes reads an Application's tree, every shard of it, from the cluster's Argo CD cache.
func (s *scope) treeNodes(ctx context.Context, a app) ([]treeNode, error) {
	instance := argocd.InstanceName(a.namespace, a.name, s.argoNamespace)
	var nodes []treeNode
	for shard, shards := int64(0), int64(1); shard < shards; shard++ {
		data, found, err := readEntry(ctx, s.redis, argocd.CacheKey{Entry: argocd.CacheEntryTree, Instance: instance, Shard: shard})
		if err != nil || !found {
			return nodes, err
		}
		var t tree
		if err := json.Unmarshal(data, &t); err != nil {
			return nil, fmt.Errorf("decode the tree of %s/%s: %w", a.namespace, a.name, err)
		}
		if shard == 0 && t.ShardsCount > 1 {
			shards = t.ShardsCount
		}
		nodes = append(append(nodes, t.Nodes...), t.OrphanedNodes...)
	}
	return nodes, nil
}
