package consoleagent

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/resp"
)

// readEntry reads a cache entry of the cluster's Argo CD as JSON, whether that Argo CD compresses its cache
// (the default: a .gz key) or not.
func readEntry(ctx context.Context, redis *resp.Client, k argocd.CacheKey) ([]byte, bool, error) {
	value, gz, found, err := readRaw(ctx, redis, k)
	if err != nil || !found || !gz {
		return value, found, err
	}
	data, err := gunzip(value)
	return data, err == nil, err
}

// readRaw reads a cache entry as stored: gz says it is gzip-compressed.
func readRaw(ctx context.Context, redis *resp.Client, k argocd.CacheKey) (value []byte, gz, found bool, err error) {
	k.Gzip = true
	if value, found, err = redis.Get(ctx, k.String()); err != nil || found {
		return value, true, found, err
	}
	k.Gzip = false
	value, found, err = redis.Get(ctx, k.String())
	return value, false, found, err
}

// cacheGet answers the read of a cache entry: gzip-compressed JSON, Secret data replaced in managed resources.
func (a *Agent) cacheGet(ctx context.Context, r *consoleapi.CacheRequest) *consoleapi.Response {
	k := argocd.CacheKey{Entry: r.Entry, Shard: r.Shard}
	switch r.Entry {
	case argocd.CacheEntryClusterInfo:
		k.Server = argocd.InClusterServer
	case argocd.CacheEntryTree, argocd.CacheEntryManagedResources:
		if resp := a.mayRead(ctx, app{namespace: r.Namespace, name: r.Name}); resp != nil {
			return resp
		}
		k.Instance = argocd.InstanceName(r.Namespace, r.Name, a.cfg.ArgoCDNamespace)
	default:
		return failure(http.StatusBadRequest, "unknown cache entry %q", r.Entry)
	}
	value, gz, found, err := readRaw(ctx, a.redis, k)
	if err != nil {
		return failure(http.StatusBadGateway, "read Argo CD's cache on cluster %s: %v", a.cfg.Cluster, err)
	}
	if !found {
		return &consoleapi.Response{Code: http.StatusNotFound}
	}
	if r.Entry == argocd.CacheEntryManagedResources {
		// Only the managed resources hold objects' content: Secrets' data is replaced before it leaves.
		if gz {
			if value, err = gunzip(value); err != nil {
				return failure(http.StatusBadGateway, "managed resources of %s/%s: %v", r.Namespace, r.Name, err)
			}
		}
		if value, err = redactManagedResources(value); err != nil {
			return failure(http.StatusBadGateway, "managed resources of %s/%s: %v", r.Namespace, r.Name, err)
		}
		gz = false
	}
	if !gz {
		if value, err = gzipBytes(value); err != nil {
			return failure(http.StatusInternalServerError, "%v", err)
		}
	}
	return &consoleapi.Response{Code: http.StatusOK, Body: value}
}

// mayRead refuses a request about an Application this cluster's agent did not deliver.
func (a *Agent) mayRead(ctx context.Context, ap app) *consoleapi.Response {
	ok, err := a.scope.delivered(ctx, ap)
	switch {
	case err != nil:
		return failure(http.StatusBadGateway, "cluster %s: %v", a.cfg.Cluster, err)
	case !ok:
		return failure(http.StatusForbidden, "cluster %s: Application %s/%s was not delivered by its argocd-pull agent", a.cfg.Cluster, ap.namespace, ap.name)
	}
	return nil
}

// subscribe streams a notification each time the Application's tree changes on the cluster, until cancelled.
func (a *Agent) subscribe(ctx context.Context, r *consoleapi.CacheRequest, send func(*consoleapi.Response) error) error {
	if resp := a.mayRead(ctx, app{namespace: r.Namespace, name: r.Name}); resp != nil {
		return send(resp)
	}
	channel := argocd.TreeChangedChannel(argocd.InstanceName(r.Namespace, r.Name, a.cfg.ArgoCDNamespace))
	notifications := make(chan struct{}, 1)
	done, err := a.redis.Subscribe(ctx, channel, func([]byte) {
		select {
		case notifications <- struct{}{}:
		default: // one pending notification says it all
		}
	})
	if err != nil {
		return send(failure(http.StatusBadGateway, "cluster %s: %v", a.cfg.Cluster, err))
	}
	if err := send(&consoleapi.Response{Code: http.StatusOK, More: true}); err != nil {
		return err
	}
	for {
		select {
		case <-notifications:
			if err := send(&consoleapi.Response{Code: http.StatusOK, More: true}); err != nil {
				return err
			}
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			return send(failure(http.StatusBadGateway, "cluster %s: subscription ended: %v", a.cfg.Cluster, err))
		}
	}
}

func gunzip(gz []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("decompress cache entry: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTreeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decompress cache entry: %w", err)
	}
	if len(data) > maxTreeBytes {
		return nil, fmt.Errorf("cache entry larger than %d bytes", maxTreeBytes)
	}
	return data, nil
}

func gzipBytes(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		return nil, fmt.Errorf("compress cache entry: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress cache entry: %w", err)
	}
	return b.Bytes(), nil
}
