package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// applyPath matches the path of a server-side apply of an Argo CD Application.
var applyPath = regexp.MustCompile(`^/apis/argoproj\.io/v1alpha1/namespaces/([^/]+)/applications/([^/]+)$`)

// withOperationReset makes the work agent's writes to the managed cluster reset an Application's old
// status.operationState before they deliver a hub operation to it, as argocd-server does when it sets an
// operation (it writes the operation with operationState nil, in one update). Argo CD's controller starts an
// operation with a JSON merge patch of status.operationState: merged into the previous operation's state, that
// one's fields (prune, an automated initiator, sync options...) would stay in the new operation, and a retry
// or a resumed operation would run with them. The work agent delivers .operation by server-side apply, which
// cannot remove fields another manager wrote, so the agent clears the old state first, while the Application
// has no operation yet, with a merge patch conditional on its resourceVersion.
func withOperationReset(cfg *rest.Config) (*rest.Config, error) {
	apps, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("managed cluster client: %w", err)
	}
	wrapped := rest.CopyConfig(cfg)
	wrapped.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &operationReset{next: next, apps: apps}
	})
	return wrapped, nil
}

type operationReset struct {
	next http.RoundTripper
	apps dynamic.Interface
}

func (o *operationReset) RoundTrip(req *http.Request) (*http.Response, error) {
	m := applyPath.FindStringSubmatch(req.URL.Path)
	if req.Method != http.MethodPatch || m == nil || req.Body == nil ||
		!strings.HasPrefix(req.Header.Get("Content-Type"), string(types.ApplyPatchType)) {
		return o.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	if marker := deliveredMarker(body); marker != "" {
		if err := o.reset(req.Context(), m[1], m[2], marker); err != nil {
			// The operation is delivered all the same; Argo CD then merges it into the old state.
			klog.FromContext(req.Context()).Error(err, "Cannot reset the operation state before delivering an operation",
				"application", klog.KRef(m[1], m[2]))
		}
	}
	return o.next.RoundTrip(out)
}

// deliveredMarker returns argocd-pull's marker in the operation of an applied Application, or "".
func deliveredMarker(body []byte) string {
	var app struct {
		Operation *struct {
			Info []struct{ Name, Value string } `json:"info"`
		} `json:"operation"`
	}
	if json.Unmarshal(body, &app) != nil || app.Operation == nil {
		return ""
	}
	for _, i := range app.Operation.Info {
		if i.Name == appstatus.OperationMarkerInfo {
			return i.Value
		}
	}
	return ""
}

// reset removes the Application's operationState when it has no operation yet and its state is not the one of
// the operation with marker (then Argo CD has not begun it).
func (o *operationReset) reset(ctx context.Context, namespace, name, marker string) error {
	client := o.apps.Resource(argocd.ApplicationGVK.GroupVersion().WithResource("applications")).Namespace(namespace)
	app, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get application %s/%s: %w", namespace, name, err)
	}
	if app.Object["operation"] != nil {
		return nil
	}
	state, ok, _ := unstructured.NestedMap(app.Object, "status", "operationState")
	if !ok || stateMarker(state) == marker {
		return nil
	}
	switch state["phase"] {
	case "Succeeded", "Failed", "Error":
	default:
		// An operation still in progress (a retry waits with phase Running) keeps its state.
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": app.GetResourceVersion()},
		"status":   map[string]any{"operationState": nil},
	})
	if err != nil {
		return err
	}
	_, err = client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		// The Application changed since it was read; the apply goes ahead.
		return nil
	}
	if err != nil {
		return fmt.Errorf("reset operation state of application %s/%s: %w", namespace, name, err)
	}
	klog.FromContext(ctx).Info("Reset the previous operation state before delivering an operation", "application", klog.KRef(namespace, name))
	return nil
}

func stateMarker(state map[string]any) string {
	info, _, _ := unstructured.NestedSlice(state, "operation", "info")
	for _, i := range info {
		if m, ok := i.(map[string]any); ok && m["name"] == appstatus.OperationMarkerInfo {
			v, _ := m["value"].(string)
			return v
		}
	}
	return ""
}
