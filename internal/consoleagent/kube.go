package consoleagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// Limits of kube answers.
const (
	// maxKubeBody bounds an answer read whole (an object, a list of events, discovery).
	maxKubeBody = 16 << 20
	// logChunk is the largest part of a log sent at once; logFlush how long a part waits to fill.
	logChunk = 32 << 10
	logFlush = 200 * time.Millisecond
)

// apiPath is a request path of the Kubernetes API, taken apart.
type apiPath struct {
	discovery                                      bool
	group, version, namespace, resource, name, sub string
}

// parsePath parses the paths argocd-server's clients use: discovery (/version, /api, /apis, /api/v1,
// /apis/<group>, /apis/<group>/<version>) and resources ([/namespaces/<ns>]/<resource>[/<name>[/<subresource>]]).
func parsePath(p string) (apiPath, error) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var ap apiPath
	switch {
	case p == "/version" || p == "/api" || p == "/apis":
		return apiPath{discovery: true}, nil
	case parts[0] == "api" && len(parts) >= 2:
		ap.version, parts = parts[1], parts[2:]
	case parts[0] == "apis" && len(parts) == 2:
		return apiPath{discovery: true, group: parts[1]}, nil
	case parts[0] == "apis" && len(parts) >= 3:
		ap.group, ap.version, parts = parts[1], parts[2], parts[3:]
	default:
		return apiPath{}, fmt.Errorf("%s is not a path of the Kubernetes API", p)
	}
	if len(parts) == 0 {
		ap.discovery = true
		return ap, nil
	}
	if parts[0] == "namespaces" && len(parts) >= 3 {
		ap.namespace, parts = parts[1], parts[2:]
	}
	for i, v := range []*string{&ap.resource, &ap.name, &ap.sub} {
		if i < len(parts) {
			*v = parts[i]
		}
	}
	if len(parts) > 3 || ap.resource == "" || slicesContainsEmpty(parts) {
		return apiPath{}, fmt.Errorf("%s is not a path of the Kubernetes API", p)
	}
	return ap, nil
}

func slicesContainsEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// kubeRequest answers a read of the cluster's API, when the console may answer it: discovery, a resource of a
// delivered Application's tree, a pod's log of one, the events of one. Everything else is refused.
func (a *Agent) kubeRequest(ctx context.Context, r *consoleapi.KubeRequest, send func(*consoleapi.Response) error) error {
	if r.Method != http.MethodGet {
		return send(failure(http.StatusMethodNotAllowed, "cluster %s is read-only from the hub's console", a.cfg.Cluster))
	}
	ap, err := parsePath(r.Path)
	if err != nil {
		return send(failure(http.StatusForbidden, "%v", err))
	}
	query, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return send(failure(http.StatusBadRequest, "bad query: %v", err))
	}
	if query.Get("watch") == "true" || query.Get("watch") == "1" {
		return send(failure(http.StatusForbidden, "watches are not served by the console"))
	}
	switch {
	case ap.discovery:
		return send(a.get(ctx, r.Path, r.RawQuery, r.Accept))
	case ap.name != "" && ap.sub == "":
		return send(a.getResource(ctx, r.Path, r.RawQuery))
	case ap.name != "" && ap.sub == "log" && ap.group == "" && ap.resource == "pods":
		return a.podLog(ctx, ap, r.RawQuery, send)
	case ap.name == "" && ap.resource == "events" && (ap.group == "" || ap.group == "events.k8s.io"):
		return send(a.listEvents(ctx, ap, r.Path, query))
	}
	return send(failure(http.StatusForbidden, "the console answers for the resources of delivered Applications only: %s refused", r.Path))
}

// getResource answers a resource that belongs to a delivered Application's tree, Secret data replaced.
func (a *Agent) getResource(ctx context.Context, path, rawQuery string) *consoleapi.Response {
	resp := a.get(ctx, path, rawQuery, "application/json")
	if resp.Code != http.StatusOK {
		return resp
	}
	if refused := a.inScope(ctx, resp.Body, path); refused != nil {
		return refused
	}
	body, err := redactObject(resp.Body)
	if err != nil {
		return failure(http.StatusBadGateway, "%v", err)
	}
	resp.Body = body
	return resp
}

// inScope refuses an object (JSON) that is not in a delivered Application's tree.
func (a *Agent) inScope(ctx context.Context, body []byte, what string) *consoleapi.Response {
	var obj struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil || obj.Metadata.UID == "" {
		return failure(http.StatusBadGateway, "cannot read the UID of %s", what)
	}
	return a.uidInScope(ctx, obj.Metadata.UID, what)
}

func (a *Agent) uidInScope(ctx context.Context, uid types.UID, what string) *consoleapi.Response {
	_, ok, err := a.scope.owner(ctx, uid)
	switch {
	case err != nil:
		return failure(http.StatusBadGateway, "cluster %s: %v", a.cfg.Cluster, err)
	case !ok:
		return failure(http.StatusForbidden, "%s on cluster %s belongs to no Application its argocd-pull agent delivered", what, a.cfg.Cluster)
	}
	return nil
}

// podLog streams the log of a pod of a delivered Application's tree, in parts.
func (a *Agent) podLog(ctx context.Context, ap apiPath, rawQuery string, send func(*consoleapi.Response) error) error {
	podPath := "/api/v1/namespaces/" + ap.namespace + "/pods/" + ap.name
	pod := a.get(ctx, podPath, "", "application/json")
	if pod.Code != http.StatusOK {
		return send(pod)
	}
	if refused := a.inScope(ctx, pod.Body, podPath); refused != nil {
		return send(refused)
	}
	resp, err := a.do(ctx, podPath+"/log", rawQuery, "")
	if err != nil {
		return send(failure(http.StatusBadGateway, "cluster %s: %v", a.cfg.Cluster, err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return send(answerOf(resp))
	}
	return streamBody(ctx, resp, send)
}

// streamBody sends a body in parts as it comes: a part when logChunk bytes are there or logFlush passed.
func streamBody(ctx context.Context, resp *http.Response, send func(*consoleapi.Response) error) error {
	type read struct {
		b   []byte
		err error
	}
	reads := make(chan read)
	go func() {
		for {
			b := make([]byte, logChunk)
			n, err := resp.Body.Read(b)
			select {
			case reads <- read{b: b[:n], err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	contentType := resp.Header.Get("Content-Type")
	var pending []byte
	flush := func(more bool) error {
		r := &consoleapi.Response{Code: http.StatusOK, ContentType: contentType, Body: pending, More: more}
		contentType, pending = "", nil
		return send(r)
	}
	timer := time.NewTimer(logFlush)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			if len(pending) > 0 {
				if err := flush(true); err != nil {
					return err
				}
			}
			timer.Reset(logFlush)
		case r := <-reads:
			pending = append(pending, r.b...)
			if r.err != nil {
				return flush(false)
			}
			if len(pending) >= logChunk {
				if err := flush(true); err != nil {
					return err
				}
			}
		}
	}
}

// listEvents answers the events of one resource of a delivered Application's tree: the field selector must
// name the resource's UID, as argocd-server's does.
func (a *Agent) listEvents(ctx context.Context, ap apiPath, path string, query url.Values) *consoleapi.Response {
	key := "involvedObject.uid"
	if ap.group == "events.k8s.io" {
		key = "regarding.uid"
	}
	selector, err := fields.ParseSelector(query.Get("fieldSelector"))
	if err != nil {
		return failure(http.StatusBadRequest, "bad field selector: %v", err)
	}
	uid, ok := selector.RequiresExactMatch(key)
	if !ok || uid == "" {
		return failure(http.StatusForbidden, "the console lists the events of one resource of a delivered Application: a field selector %s=<uid> is required", key)
	}
	if refused := a.uidInScope(ctx, types.UID(uid), "the resource of these events"); refused != nil {
		return refused
	}
	return a.get(ctx, path, query.Encode(), "application/json")
}

// get reads a path of the cluster's API whole and answers what the API answered.
func (a *Agent) get(ctx context.Context, path, rawQuery, accept string) *consoleapi.Response {
	resp, err := a.do(ctx, path, rawQuery, accept)
	if err != nil {
		return failure(http.StatusBadGateway, "cluster %s: %v", a.cfg.Cluster, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return answerOf(resp)
}

// answerOf reads a whole answer of the cluster's API.
func answerOf(resp *http.Response) *consoleapi.Response {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKubeBody+1))
	if err != nil {
		return failure(http.StatusBadGateway, "read the cluster's answer: %v", err)
	}
	if len(body) > maxKubeBody {
		return failure(http.StatusBadGateway, "the cluster's answer is larger than %d bytes", maxKubeBody)
	}
	return &consoleapi.Response{Code: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}
}

// do sends a GET to the cluster's API with the agent's identity there.
func (a *Agent) do(ctx context.Context, path, rawQuery, accept string) (*http.Response, error) {
	if a.http == nil {
		return nil, errors.New("no client of the cluster's API")
	}
	u := strings.TrimSuffix(a.cfg.Kube.Host, "/") + path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", path, err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	return resp, nil
}

// httpClientFor is a client of the cluster's API with the agent's credentials.
func httpClientFor(cfg *rest.Config) (*http.Client, error) {
	c, err := rest.HTTPClientFor(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("managed cluster http client: %w", err)
	}
	return c, nil
}
