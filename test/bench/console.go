package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/gitopscluster"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/resp"
)

// consoleSamples is how many Applications the console measurement reads, each in a cluster of its own where
// the fleet has that many.
const consoleSamples = 300

// consoleResult is what the console measurement found.
type consoleResult struct {
	// Streams is how many console streams the server held (one per simulated cluster).
	Streams int
	// Tree is the latency of an Application's resource tree read through the server's redis proxy, which
	// asks the cluster over its stream; Held of the same read again, answered from the answers held briefly;
	// Live of a Pod's live manifest read through the kube proxy with the cluster's credentials, on a new
	// connection (the first read of a cluster: CONNECT and a TLS handshake with its client certificate).
	TreeP50, TreeP99, HeldP50, LiveP50, LiveP99 time.Duration
	Samples, Errors                             int
	// ServerRSSBytes is the server's resident memory with every stream open, after the reads.
	ServerRSSBytes int64
}

// measureConsole reads what the hub's argocd-server reads when someone opens an Application in the UI: its
// resource tree through argocd-pull server's redis proxy, and the live manifest of one of its Pods through the
// kube proxy, with the cluster secret the GitOpsCluster wrote for that cluster (its client certificate and the
// proxy). Each answer comes from a simulated cluster over its console stream; one read at a time, as one user.
func measureConsole(ctx context.Context, sc Scenario, f *localfleet.System, clusters []string, res *Result) error {
	hub, err := clientFor(f.Env.Hub.Config(), sc.QPS, sc.Burst)
	if err != nil {
		return err
	}
	err = waitFor(ctx, 10*time.Minute, func() (bool, string) {
		gc := &v1alpha1.GitOpsCluster{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: localfleet.ArgoCDNamespace, Name: localfleet.GitOpsClusterName}, gc); err != nil {
			return false, fmt.Sprintf("gitopscluster: %v", err)
		}
		c := meta.FindStatusCondition(gc.Status.Conditions, v1alpha1.ConditionConsoleReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("gitopscluster: console not ready: %+v", c)
		}
		return true, ""
	}, sc.Log)
	if err != nil {
		return err
	}
	var streams int
	err = waitFor(ctx, 10*time.Minute, func() (bool, string) {
		if streams, err = consoleStreams(ctx, f); err != nil {
			return false, fmt.Sprintf("console streams: %v", err)
		}
		return streams >= len(clusters), fmt.Sprintf("console streams %d/%d", streams, len(clusters))
	}, sc.Log)
	if err != nil {
		return err
	}
	out := &consoleResult{Streams: streams}
	res.Console = out
	proxy := &resp.Client{Addr: f.Console.RedisProxy, Timeout: 30 * time.Second}
	defer proxy.Close()
	var tree, held, live []time.Duration
	total := len(clusters) * sc.AppSets
	n := min(consoleSamples, total)
	for _, idx := range rand.New(rand.NewPCG(1, 2)).Perm(total)[:n] { //nolint:gosec // a fixed sample, not a secret
		cluster, set := clusters[idx/sc.AppSets], appSetName(idx%sc.AppSets)
		name := cluster + "-" + set
		key := argocd.CacheKey{Entry: argocd.CacheEntryTree, Gzip: true,
			Instance: argocd.InstanceName(localfleet.ArgoCDNamespace, name, localfleet.ArgoCDNamespace)}.String()
		start := time.Now()
		gz, found, err := proxy.Get(ctx, key)
		if err != nil || !found {
			out.Errors++
			sc.Log("console: tree of %s: found %v, %v", name, found, err)
			continue
		}
		tree = append(tree, time.Since(start))
		start = time.Now()
		if _, _, err := proxy.Get(ctx, key); err == nil {
			held = append(held, time.Since(start))
		}
		pod, err := podOfTree(gz)
		if err != nil {
			out.Errors++
			sc.Log("console: tree of %s: %v", name, err)
			continue
		}
		c, err := clusterClient(ctx, hub, cluster)
		if err != nil {
			return err
		}
		start = time.Now()
		err = getLive(ctx, c, cluster, pod)
		c.CloseIdleConnections()
		if err != nil {
			out.Errors++
			sc.Log("console: live pod of %s: %v", name, err)
			continue
		}
		live = append(live, time.Since(start))
		out.Samples++
	}
	for _, d := range [][]time.Duration{tree, held, live} {
		slices.Sort(d)
	}
	out.TreeP50, out.TreeP99, out.HeldP50 = percentile(tree, 50), percentile(tree, 99), percentile(held, 50)
	out.LiveP50, out.LiveP99 = percentile(live, 50), percentile(live, 99)
	if u, err := processUsage(f.ServerPid()); err == nil {
		out.ServerRSSBytes = u.RSSBytes
	}
	sc.Log("console: %d streams; tree p50 %s p99 %s (held %s), live Pod p50 %s p99 %s over %d Applications, %d errors; server RSS %s",
		streams, ms(out.TreeP50), ms(out.TreeP99), ms(out.HeldP50), ms(out.LiveP50), ms(out.LiveP99), out.Samples, out.Errors, mib(out.ServerRSSBytes))
	if out.Errors > 0 {
		return fmt.Errorf("console: %d of %d reads failed", out.Errors, n)
	}
	return nil
}

// consoleStreams is the server's count of open console streams (its metric argocd_pull_console_streams).
func consoleStreams(ctx context.Context, f *localfleet.System) (int, error) {
	streams := -1
	err := scrapeMetrics(ctx, f.ServerClient().HTTPClient(), "https://"+f.Server.HTTP+"/metrics", func(name, _ string, v float64) {
		if name == "argocd_pull_console_streams" {
			streams = int(v)
		}
	})
	if err != nil {
		return 0, err
	}
	if streams < 0 {
		return 0, errors.New("no argocd_pull_console_streams in the server's metrics")
	}
	return streams, nil
}

// treePod is a Pod of a resource tree.
type treePod struct{ Namespace, Name string }

// podOfTree is the first Pod of a gzip-compressed resource tree.
func podOfTree(gz []byte) (treePod, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return treePod{}, err
	}
	var tree struct {
		Nodes []struct{ Kind, Namespace, Name string } `json:"nodes"`
	}
	if err := json.NewDecoder(r).Decode(&tree); err != nil {
		return treePod{}, fmt.Errorf("decode tree: %w", err)
	}
	for _, n := range tree.Nodes {
		if n.Kind == "Pod" {
			return treePod{Namespace: n.Namespace, Name: n.Name}, nil
		}
	}
	return treePod{}, fmt.Errorf("no Pod among %d nodes", len(tree.Nodes))
}

// clusterClient is an HTTP client for a cluster as argocd-server makes it from the cluster secret: through
// the secret's proxyUrl, with its client certificate, verifying the proxy with its CA and server name.
func clusterClient(ctx context.Context, hub client.Client, cluster string) (*http.Client, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: localfleet.ArgoCDNamespace, Name: gitopscluster.SecretName(cluster)}
	if err := hub.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("get cluster secret %s: %w", key, err)
	}
	var cfg struct {
		ProxyURL        string `json:"proxyUrl"`
		TLSClientConfig struct {
			ServerName                string
			CAData, CertData, KeyData []byte
		} `json:"tlsClientConfig"`
	}
	if err := json.Unmarshal(secret.Data["config"], &cfg); err != nil {
		return nil, fmt.Errorf("decode config of cluster secret %s: %w", key, err)
	}
	proxyURL, err := url.Parse(cfg.ProxyURL)
	if err != nil || cfg.ProxyURL == "" {
		return nil, fmt.Errorf("cluster secret %s has no console proxy (%q): %v", key, cfg.ProxyURL, err)
	}
	cert, err := tls.X509KeyPair(cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData)
	if err != nil {
		return nil, fmt.Errorf("client certificate of cluster secret %s: %w", key, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cfg.TLSClientConfig.CAData)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert},
			ServerName: cfg.TLSClientConfig.ServerName, MinVersion: tls.VersionTLS12}}}, nil
}

// getLive reads a Pod's live manifest from its cluster through the console.
func getLive(ctx context.Context, c *http.Client, cluster string, pod treePod) error {
	u := argocd.ClusterServerURL(cluster) + "/api/v1/namespaces/" + pod.Namespace + "/pods/" + pod.Name
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	r, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = r.Body.Close() }()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(pod.Name)) {
		return fmt.Errorf("GET %s: %s %.200s", u, r.Status, body)
	}
	return nil
}
