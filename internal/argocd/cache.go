package argocd

import (
	"strconv"
	"strings"
)

// Argo CD keeps what its controller computed of each Application in redis, and argocd-server reads it from
// there (util/cache/appstate in Argo CD): the resource tree, the managed resources (live and target state of
// each), and, per destination cluster, the cluster's info. A key is the entry's name, the Application's
// instance name, the cache version and, with gzip compression (argocd-server's default), ".gz":
//
//	app|resources-tree|<instance>|1.8.3.gz        (a large tree goes on in app|resources-tree|<instance>|<n>|1.8.3.gz)
//	app|managed-resources|<instance>|1.8.3.gz
//	cluster|info|<server URL>|1.8.3.gz
//
// The controller publishes an empty message on app|managed-resources|<instance>|1.8.3 (no ".gz") whenever it
// wrote an Application's tree; argocd-server subscribes to it to stream trees to the UI.
const (
	// CacheVersion is the cache version of Argo CD v3.2 (common.CacheVersion).
	CacheVersion = "1.8.3"
	// CacheEntryTree is an Application's resource tree.
	CacheEntryTree = "resources-tree"
	// CacheEntryManagedResources is an Application's managed resources, with live and target state.
	CacheEntryManagedResources = "managed-resources"
	// CacheEntryClusterInfo is a cluster's info (server version, cache status, Applications count).
	CacheEntryClusterInfo = "cluster-info"
	// gzSuffix ends the keys of gzip-compressed values.
	gzSuffix = ".gz"
)

// CacheKey is a parsed key of an Application's cache entry, or of a cluster's info.
type CacheKey struct {
	// Entry is CacheEntryTree, CacheEntryManagedResources or CacheEntryClusterInfo.
	Entry string
	// Instance is the Application's instance name (see InstanceName); empty for cluster info.
	Instance string
	// Server is the cluster's server URL of a cluster info key.
	Server string
	// Shard is the shard of a resource tree: 0 for the first key, n for app|resources-tree|<instance>|<n>.
	Shard int64
	// Gzip is a key of a gzip-compressed value.
	Gzip bool
}

// InstanceName is the name Argo CD gives an Application in cache keys and tracking labels: its name when it
// lives in Argo CD's own namespace (controlNamespace), else <namespace>_<name>.
func InstanceName(namespace, name, controlNamespace string) string {
	if namespace == "" || namespace == controlNamespace {
		return name
	}
	return namespace + "_" + name
}

// SplitInstanceName is the Application's namespace and name of an instance name; an instance name without a
// namespace is an Application in controlNamespace. Neither a namespace nor a name may contain '_'.
func SplitInstanceName(instance, controlNamespace string) (namespace, name string) {
	if ns, n, ok := strings.Cut(instance, "_"); ok {
		return ns, n
	}
	return controlNamespace, instance
}

// String is the key as Argo CD writes it.
func (k CacheKey) String() string {
	var b strings.Builder
	switch k.Entry {
	case CacheEntryClusterInfo:
		b.WriteString("cluster|info|" + k.Server)
	default:
		b.WriteString("app|" + k.Entry + "|" + k.Instance)
		if k.Entry == CacheEntryTree && k.Shard > 0 {
			b.WriteString("|" + strconv.FormatInt(k.Shard, 10))
		}
	}
	b.WriteString("|" + CacheVersion)
	if k.Gzip {
		b.WriteString(gzSuffix)
	}
	return b.String()
}

// TreeChangedChannel is the pub/sub channel on which Argo CD's controller announces a new tree (and managed
// resources) of an Application.
func TreeChangedChannel(instance string) string {
	return "app|" + CacheEntryManagedResources + "|" + instance + "|" + CacheVersion
}

// ParseTreeChangedChannel is the instance name of a TreeChangedChannel, or false for another channel.
func ParseTreeChangedChannel(channel string) (string, bool) {
	rest, ok := strings.CutPrefix(channel, "app|"+CacheEntryManagedResources+"|")
	if !ok {
		return "", false
	}
	instance, ok := strings.CutSuffix(rest, "|"+CacheVersion)
	if !ok || instance == "" || strings.Contains(instance, "|") {
		return "", false
	}
	return instance, true
}

// ParseCacheKey parses a key of an Application's tree or managed resources, or of a cluster's info, of this
// cache version; other keys are not parsed (false).
func ParseCacheKey(key string) (CacheKey, bool) {
	var k CacheKey
	key, k.Gzip = strings.CutSuffix(key, gzSuffix)
	key, ok := strings.CutSuffix(key, "|"+CacheVersion)
	if !ok {
		return CacheKey{}, false
	}
	if server, ok := strings.CutPrefix(key, "cluster|info|"); ok && server != "" {
		k.Entry, k.Server = CacheEntryClusterInfo, server
		return k, true
	}
	rest, ok := strings.CutPrefix(key, "app|")
	if !ok {
		return CacheKey{}, false
	}
	parts := strings.Split(rest, "|")
	switch {
	case len(parts) == 2 && (parts[0] == CacheEntryTree || parts[0] == CacheEntryManagedResources):
		k.Entry, k.Instance = parts[0], parts[1]
	case len(parts) == 3 && parts[0] == CacheEntryTree:
		shard, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || shard < 1 {
			return CacheKey{}, false
		}
		k.Entry, k.Instance, k.Shard = parts[0], parts[1], shard
	default:
		return CacheKey{}, false
	}
	if k.Instance == "" {
		return CacheKey{}, false
	}
	return k, true
}
