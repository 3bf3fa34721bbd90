package console

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// ConsoleIdentityPrefix starts the common name of the client certificate a hub cluster secret holds for a
// managed cluster: console:<cluster>. Such a certificate reads that cluster, through this proxy, and nothing else.
const ConsoleIdentityPrefix = "console:"

// KubeProxy is the managed clusters' API as the hub's argocd-server sees it. Each managed cluster's Argo CD
// cluster secret keeps its never-resolving server URL (https://<cluster>.ocm-pull.invalid) and names this proxy
// as its proxyUrl: argocd-server asks the proxy to CONNECT to that host, and talks TLS through the tunnel with
// the proxy itself, which presents the console's serving certificate and requires the cluster's client
// certificate (CN console:<cluster>, issued by the console CA). The proxy then answers argocd-server's reads —
// discovery, a live resource, events, pod logs — from the cluster's agent. Nothing dials the managed cluster.
type KubeProxy struct {
	// Hub sends the reads to the agents.
	Hub *Hub
	// TLS returns the configuration of the tunnelled TLS: the serving certificate and the console CA, which
	// verifies client certificates. It is read for every tunnel, so rotated certificates take effect at once.
	TLS func() (*tls.Config, error)
}

// Serve accepts CONNECT requests on l until it is closed or ctx ends.
func (p *KubeProxy) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.connect(ctx, w, r) }),
		ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kube proxy: %w", err)
	}
	return nil
}

// connect opens a tunnel to a managed cluster's API: the TLS inside it ends here. The tunnel lasts until its
// client closes it or ctx (the proxy's) ends: a hijacked request's own context does not outlive the hijack.
func (p *KubeProxy) connect(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "argocd-pull console: this address is a managed cluster's proxyUrl in its Argo CD cluster secret; "+
			"it serves CONNECT to https://<cluster>."+argocd.ClusterServerDomain+" only", http.StatusMethodNotAllowed)
		return
	}
	cluster, ok := argocd.ClusterOfServerHost(r.Host)
	if !ok {
		p.Hub.metrics.refused.WithLabelValues("kube", "host").Inc()
		http.Error(w, fmt.Sprintf("argocd-pull console: %q is not a managed cluster's server (<cluster>.%s)", r.Host,
			argocd.ClusterServerDomain), http.StatusForbidden)
		return
	}
	cfg, err := p.TLS()
	if err != nil {
		http.Error(w, "argocd-pull console: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "argocd-pull console: cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = conn.Close()
		return
	}
	logger := klog.FromContext(ctx).WithValues("cluster", cluster)
	tlsConn := tls.Server(&bufferedConn{Conn: conn, r: buf.Reader}, cfg)
	hsCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tlsConn.HandshakeContext(hsCtx); err != nil {
		p.Hub.metrics.refused.WithLabelValues("kube", "handshake").Inc()
		logger.V(1).Info("Console tunnel refused at the TLS handshake", "err", err)
		_ = conn.Close()
		return
	}
	certs := tlsConn.ConnectionState().PeerCertificates
	if len(certs) == 0 || certs[0].Subject.CommonName != ConsoleIdentityPrefix+cluster {
		p.Hub.metrics.refused.WithLabelValues("kube", "identity").Inc()
		name := ""
		if len(certs) > 0 {
			name = certs[0].Subject.CommonName
		}
		logger.Info("Console tunnel refused: the client certificate is not this cluster's", "certificate", name)
		writeRawStatus(tlsConn, http.StatusForbidden, fmt.Sprintf("argocd-pull console: certificate %q may not read cluster %s", name, cluster))
		_ = tlsConn.Close()
		return
	}
	srv := &http.Server{Handler: p.clusterHandler(cluster), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return klog.NewContext(ctx, logger) }}
	stop := context.AfterFunc(ctx, func() { _ = tlsConn.Close() })
	defer stop()
	_ = srv.Serve(newOneConnListener(tlsConn))
}

// clusterHandler serves one cluster's reads inside a tunnel.
func (p *KubeProxy) clusterHandler(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			p.Hub.metrics.refused.WithLabelValues("kube", "method").Inc()
			writeStatus(w, http.StatusMethodNotAllowed, "argocd-pull console: managed clusters are read-only from the hub ("+r.Method+" refused)")
			return
		}
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			p.Hub.metrics.refused.WithLabelValues("kube", "watch").Inc()
			writeStatus(w, http.StatusForbidden, "argocd-pull console: watches are not served")
			return
		}
		call, err := p.Hub.Open(r.Context(), cluster, consoleapi.Request{Kube: &consoleapi.KubeRequest{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Accept: r.Header.Get("Accept")}})
		if err != nil {
			code := http.StatusBadGateway
			if errors.Is(err, ErrNotConnected) {
				code = http.StatusServiceUnavailable
			}
			writeStatus(w, code, "argocd-pull console: "+err.Error())
			return
		}
		defer call.Close()
		p.stream(w, r, call)
	})
}

// stream writes an agent's answer: its first part within the Hub's timeout, then, for a followed log, each part
// as it comes until the answer ends or the client goes.
func (p *KubeProxy) stream(w http.ResponseWriter, r *http.Request, call *Call) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), p.Hub.Timeout())
	first, err := call.Next(ctx)
	cancel()
	p.Hub.metrics.latency.WithLabelValues("kube").Observe(time.Since(start).Seconds())
	if err != nil {
		writeStatus(w, http.StatusGatewayTimeout, "argocd-pull console: "+err.Error())
		return
	}
	if first.ContentType != "" {
		w.Header().Set("Content-Type", first.ContentType)
	}
	if first.Code != http.StatusOK && len(first.Body) == 0 {
		writeStatus(w, first.Code, first.Message)
		return
	}
	w.WriteHeader(first.Code)
	_, _ = w.Write(first.Body)
	flusher, _ := w.(http.Flusher)
	for part := first; part.More; {
		if flusher != nil {
			flusher.Flush()
		}
		if part, err = call.Next(r.Context()); err != nil {
			return
		}
		if _, err := w.Write(part.Body); err != nil {
			return
		}
	}
}

// writeStatus writes a Kubernetes Status, which client-go turns into a readable error.
func writeStatus(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(statusOf(code, message))
}

func statusOf(code int, message string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: message, Reason: reasonOf(code), Code: int32(code)} //nolint:gosec // HTTP status codes fit
}

func reasonOf(code int) metav1.StatusReason {
	switch code {
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusMethodNotAllowed:
		return metav1.StatusReasonMethodNotAllowed
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	}
	return metav1.StatusReasonInternalError
}

// writeRawStatus answers the first request of a refused tunnel with a Status and closes it.
func writeRawStatus(c net.Conn, code int, message string) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return
	}
	body, _ := json.Marshal(statusOf(code, message))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// bufferedConn is a hijacked connection whose first bytes may already sit in the HTTP server's reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConnListener hands one connection to an http.Server, then blocks until the connection is closed.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &closeNotifyConn{Conn: c, onClose: func() { l.once.Do(func() { close(l.closed) }) }}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }

type closeNotifyConn struct {
	net.Conn
	onClose func()
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.onClose()
	return err
}
