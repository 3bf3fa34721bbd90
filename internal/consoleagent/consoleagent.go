// Package consoleagent is a managed cluster's side of argocd-pull's console. It opens the console stream on
// argocd-pull server's agent endpoint (with the agent's own credentials: it dials out, the hub never dials in)
// and answers the hub's requests about the Applications the cluster's agent delivered: their resource tree and
// managed resources from the cluster's Argo CD cache (its redis), and read-only requests to the cluster's API for
// the resources in those trees — a live manifest, events, pod logs — and discovery. Everything else is refused,
// and Secret data never leaves the cluster: it is replaced before an answer is sent. It writes nothing.
package consoleagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	workclientset "open-cluster-management.io/api/client/work/clientset/versioned"

	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/resp"
)

// Config is what the console of one managed cluster needs.
type Config struct {
	// Cluster is the managed cluster's name.
	Cluster string
	// AgentID is the work agent's ID: the AppliedManifestWorks it applied name the delivered Applications.
	AgentID string
	// GRPCConfig is the sdk-go gRPC client config of the server's agent endpoint (url, CA, client certificate
	// or token): the work agent's, in Maestro mode.
	GRPCConfig string
	// Kube is the managed cluster's API.
	Kube *rest.Config
	// Redis is the cluster's Argo CD redis; RedisPassword its password, if it has one.
	Redis         string
	RedisPassword string
	// ArgoCDNamespace is where the cluster's Argo CD runs: an Application there has its bare name as its
	// instance name.
	ArgoCDNamespace string
	// MaxConcurrent bounds the requests answered at once.
	MaxConcurrent int
}

// Agent answers the console's requests for one managed cluster.
type Agent struct {
	cfg   Config
	redis *resp.Client
	http  *http.Client
	scope *scope

	sendMu  sync.Mutex
	stream  consoleapi.Stream
	running sync.Map // request ID → context.CancelFunc of a streamed answer
}

// New returns an Agent for cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 16
	}
	httpClient, err := httpClientFor(cfg.Kube)
	if err != nil {
		return nil, err
	}
	works, err := workclientset.NewForConfig(cfg.Kube)
	if err != nil {
		return nil, fmt.Errorf("managed cluster work client: %w", err)
	}
	redis := &resp.Client{Addr: cfg.Redis, Password: cfg.RedisPassword}
	a := &Agent{cfg: cfg, redis: redis, http: httpClient}
	a.scope = newScope(cfg.AgentID, cfg.ArgoCDNamespace, works, redis)
	return a, nil
}

// Run keeps the console stream open until ctx ends, opening it again after any loss with the process's
// reconnect pace.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("cluster", a.cfg.Cluster)
	ctx = klog.NewContext(ctx, logger)
	opts, err := grpcoptions.BuildGRPCOptionsFromFlags(a.cfg.GRPCConfig)
	if err != nil {
		return fmt.Errorf("console: read gRPC config %s: %w", a.cfg.GRPCConfig, err)
	}
	defer func() { _ = opts.Dialer.Close() }()
	defer a.redis.Close()
	var backoff reconnect.Backoff
	logged := ""
	for ctx.Err() == nil {
		err := a.session(ctx, opts.Dialer)
		if ctx.Err() != nil {
			return nil
		}
		wait := backoff.Delay(time.Now())
		if status.Code(err) == codes.Unimplemented {
			// A server without the console: asking again every few seconds would be traffic for nothing.
			wait = noConsoleRetry
			err = fmt.Errorf("the server does not serve the console (argocd-pull server without --console-* flags, or not argocd-pull server); asking again every %s: %w", noConsoleRetry, err)
		}
		if err != nil && err.Error() != logged {
			logged = err.Error()
			logger.Info("Console stream lost; opening it again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// noConsoleRetry is how long an agent waits before it asks a server without the console again.
const noConsoleRetry = 5 * time.Minute

// session opens one console stream and answers its requests until it ends.
func (a *Agent) session(ctx context.Context, dialer *grpcoptions.GRPCDialer) error {
	conn, err := dialer.Dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := consoleapi.Connect(metadata.AppendToOutgoingContext(ctx, consoleapi.ClusterHeader, a.cfg.Cluster), conn,
		grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	a.sendMu.Lock()
	a.stream = stream
	a.sendMu.Unlock()
	klog.FromContext(ctx).Info("Console stream open")
	sem := make(chan struct{}, a.cfg.MaxConcurrent)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the server closed the console stream")
			}
			return err
		}
		if req.Cancel {
			if stop, ok := a.running.LoadAndDelete(req.ID); ok {
				stop.(context.CancelFunc)()
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a.answer(ctx, req)
		}()
	}
}

// answer answers one request.
func (a *Agent) answer(ctx context.Context, req *consoleapi.Request) {
	reqCtx, stop := context.WithCancel(ctx)
	a.running.Store(req.ID, stop)
	defer func() {
		a.running.Delete(req.ID)
		stop()
	}()
	send := func(r *consoleapi.Response) error {
		r.ID = req.ID
		return a.send(r)
	}
	var err error
	switch {
	case req.Cache != nil && req.Cache.Op == consoleapi.CacheSubscribe:
		err = a.subscribe(reqCtx, req.Cache, send)
	case req.Cache != nil:
		err = send(a.cacheGet(reqCtx, req.Cache))
	case req.Kube != nil:
		err = a.kubeRequest(reqCtx, req.Kube, send)
	default:
		err = send(&consoleapi.Response{Code: http.StatusBadRequest, Message: "empty console request"})
	}
	if err != nil && ctx.Err() == nil && reqCtx.Err() == nil {
		klog.FromContext(ctx).V(1).Info("Cannot answer a console request", "err", err)
	}
}

func (a *Agent) send(r *consoleapi.Response) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	if a.stream == nil {
		return errors.New("no console stream")
	}
	return a.stream.Send(r)
}

// failure is an answer that says why a request cannot be answered.
func failure(code int, format string, args ...any) *consoleapi.Response {
	return &consoleapi.Response{Code: code, Message: fmt.Sprintf(format, args...)}
}
