package workclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
)

// bundleList is the page envelope of Maestro's REST API.
type bundleList struct {
	Page  int      `json:"page"`
	Size  int      `json:"size"`
	Total int      `json:"total"`
	Items []bundle `json:"items"`
}

// bundle is a resource bundle of Maestro's REST API: one work's metadata, version and status.
type bundle struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	ConsumerName string          `json:"consumer_name"`
	Version      int64           `json:"version"`
	CreatedAt    time.Time       `json:"created_at"`
	DeletedAt    *time.Time      `json:"deleted_at,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Status       *bundleStatus   `json:"status,omitempty"`
}

type bundleStatus struct {
	Conditions     []metav1.Condition         `json:"conditions,omitempty"`
	ResourceStatus []workv1.ManifestCondition `json:"resourceStatus,omitempty"`
	SequenceID     string                     `json:"SequenceID,omitempty"`
}

// restLister pages through the resource bundles of one source on a Maestro(-compatible) server.
type restLister struct {
	baseURL  string
	client   *http.Client
	token    string
	source   string
	pageSize int
}

// list returns every work of the source, page by page.
func (l *restLister) list(ctx context.Context) ([]*workv1.ManifestWork, error) {
	var works []*workv1.ManifestWork
	for page := 1; ; page++ {
		p, err := l.page(ctx, page)
		if err != nil {
			return nil, err
		}
		for _, b := range p.Items {
			w, err := b.work()
			if err != nil {
				return nil, err
			}
			works = append(works, w)
		}
		if len(p.Items) == 0 || len(works) >= p.Total {
			return works, nil
		}
	}
}

func (l *restLister) page(ctx context.Context, page int) (*bundleList, error) {
	q := url.Values{}
	q.Set("search", fmt.Sprintf("source = '%s'", strings.ReplaceAll(l.source, "'", "''")))
	q.Set("page", strconv.Itoa(page))
	q.Set("size", strconv.Itoa(l.pageSize))
	u := strings.TrimSuffix(l.baseURL, "/") + "/api/maestro/v1/resource-bundles?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("list resource bundles: %w", err)
	}
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list resource bundles page %d: %w", page, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("read resource bundles page %d: %w", page, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list resource bundles page %d: %s: %s", page, resp.Status, strings.TrimSpace(string(body)))
	}
	out := &bundleList{}
	if err := json.Unmarshal(body, out); err != nil {
		return nil, fmt.Errorf("decode resource bundles page %d: %w", page, err)
	}
	return out, nil
}

// ready asks the server whether it is ready (its /readyz: serving, with its database reachable).
func (l *restLister) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(l.baseURL, "/")+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("ask the server whether it is ready: %w", err)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("ask the server whether it is ready: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("the server is not ready: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// readyTimeout bounds a readiness question to the server.
const readyTimeout = 3 * time.Second

// work turns a resource bundle back into the ManifestWork the source published, with its latest status and
// without its manifests.
func (b *bundle) work() (*workv1.ManifestWork, error) {
	w := &workv1.ManifestWork{}
	if len(b.Metadata) > 0 {
		if err := json.Unmarshal(b.Metadata, &w.ObjectMeta); err != nil {
			return nil, fmt.Errorf("decode metadata of resource bundle %s: %w", b.ID, err)
		}
	}
	w.UID = kubetypes.UID(b.ID)
	w.Namespace = b.ConsumerName
	if w.Name == "" {
		w.Name = b.Name
	}
	w.Generation = b.Version
	w.ResourceVersion = strconv.FormatInt(b.Version, 10)
	if w.CreationTimestamp.IsZero() {
		w.CreationTimestamp = metav1.NewTime(b.CreatedAt)
	}
	if b.DeletedAt != nil {
		w.DeletionTimestamp = &metav1.Time{Time: *b.DeletedAt}
	}
	if b.Status != nil {
		w.Status.Conditions = b.Status.Conditions
		w.Status.ResourceStatus.Manifests = b.Status.ResourceStatus
		if w.Annotations == nil {
			w.Annotations = map[string]string{}
		}
		w.Annotations[common.CloudEventsSequenceIDAnnotationKey] = b.Status.SequenceID
		w.Finalizers = utils.EnsureManifestWorkFinalizer(w.Finalizers)
	}
	return w, nil
}
