package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubetypes "k8s.io/apimachinery/pkg/types"

	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/statushash"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/payload"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/server/store"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

func restPage(t *testing.T, s *Server, q url.Values) restapi.List[restapi.ResourceBundle] {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + restapi.BasePath + "/resource-bundles?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list resource bundles: %s", resp.Status)
	}
	var list restapi.List[restapi.ResourceBundle]
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list
}

// bundleToWork turns a listed resource bundle back into the ManifestWork a source holds, as
// docs/server.md describes.
func bundleToWork(t *testing.T, b restapi.ResourceBundle) *workv1.ManifestWork {
	t.Helper()
	w := &workv1.ManifestWork{}
	if err := json.Unmarshal(b.Metadata, &w.ObjectMeta); err != nil {
		t.Fatal(err)
	}
	w.Name, w.Namespace, w.UID, w.Generation = b.Name, b.ConsumerName, kubetypes.UID(b.ID), b.Version
	var manifests []json.RawMessage
	if len(b.Manifests) > 0 {
		if err := json.Unmarshal(b.Manifests, &manifests); err != nil {
			t.Fatal(err)
		}
	}
	for _, raw := range manifests {
		w.Spec.Workload.Manifests = append(w.Spec.Workload.Manifests, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	if b.DeletedAt != nil {
		w.DeletionTimestamp = &metav1.Time{Time: *b.DeletedAt}
		w.Finalizers = []string{workv1.ManifestWorkFinalizer}
	}
	if b.Status == nil {
		return w
	}
	raw, err := json.Marshal(b.Status)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Conditions     []metav1.Condition         `json:"conditions"`
		ResourceStatus []workv1.ManifestCondition `json:"resourceStatus"`
		SequenceID     string                     `json:"SequenceID"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	w.Status.Conditions, w.Status.ResourceStatus.Manifests = st.Conditions, st.ResourceStatus
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[common.CloudEventsSequenceIDAnnotationKey] = st.SequenceID
	w.Finalizers = []string{workv1.ManifestWorkFinalizer}
	return w
}

// restGet answers a list request with its status code and its items, each as raw JSON by field.
func restGet(t *testing.T, s *Server, q url.Values) (int, []map[string]json.RawMessage) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + restapi.BasePath + "/resource-bundles?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var list restapi.List[map[string]json.RawMessage]
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, list.Items
}

// checkFieldSelection: a list with `fields` gives each item those fields (and id, kind and href) alone, each as
// the whole item has it; all of them give the whole item; an unknown field is a bad request.
func checkFieldSelection(t *testing.T, s *Server, whole []restapi.ResourceBundle) {
	t.Helper()
	search := url.Values{"search": {"source = 'hub' and consumer_name = 'cluster1'"}, "size": {"3"}}
	withFields := func(fields string) url.Values {
		q := url.Values{"fields": {fields}}
		for k, v := range search {
			q[k] = v
		}
		return q
	}
	code, items := restGet(t, s, withFields("name,status,metadata"))
	if code != http.StatusOK || len(items) != len(whole) {
		t.Fatalf("fields=name,status,metadata: %d, %d items", code, len(items))
	}
	for i, item := range items {
		var keys []string
		for k := range item {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"href", "id", "kind", "metadata", "name", "status"}; !slices.Equal(keys, want) {
			t.Errorf("item %d has fields %v, want %v", i, keys, want)
		}
		var status map[string]json.RawMessage
		if err := json.Unmarshal(item["status"], &status); err != nil || !reflect.DeepEqual(status, whole[i].Status) {
			t.Errorf("item %d status %s, the whole item's %v", i, item["status"], whole[i].Status)
		}
	}
	// Every field: the same items as without the selection.
	_, all := restGet(t, s, withFields("id,kind,href,name,consumer_name,version,created_at,updated_at,deleted_at,metadata,manifests,delete_option,manifest_configs,status"))
	_, plain := restGet(t, s, search)
	if !reflect.DeepEqual(all, plain) {
		t.Errorf("every field selected:\n%v\nno selection:\n%v", all, plain)
	}
	if code, _ := restGet(t, s, withFields("name,spec")); code != http.StatusBadRequest {
		t.Errorf("fields=name,spec: %d, want 400", code)
	}
}

func TestRESTListAndConsumers(t *testing.T) {
	ctx := context.Background()
	o := testOptions(testDB(t), "one")
	o.MaxPageSize = 3
	s := startServer(t, o)
	var out bytes.Buffer
	client := restapi.ClientOptions{Server: "http://" + s.HTTPAddr()}
	for _, name := range []string{"cluster1", "cluster2"} {
		create := &restapi.ConsumerCreateOptions{ClientOptions: client, Name: name, Labels: map[string]string{"env": "test"}, Out: &out}
		if err := create.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := (&restapi.ConsumerCreateOptions{ClientOptions: client, Name: "cluster1", Out: &out}).Run(ctx); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("second create: %v", err)
	}
	startAgent(t, grpcOptions(s.AgentAddr()), "cluster1")
	startAgent(t, grpcOptions(s.AgentAddr()), "cluster2")
	source := startSource(t, grpcOptions(s.SourceAddr()), "hub")
	applied(t, source, "cluster1", "a1", "a2", "a3", "a4")
	applied(t, source, "cluster2", "b1")

	page := restPage(t, s, url.Values{"search": {"source = 'hub' and consumer_name = 'cluster1'"}, "size": {"10"}, "page": {"1"}})
	if page.Kind != "ResourceBundleList" || page.Total != 4 || page.Size != 3 || len(page.Items) != 3 || page.Page != 1 {
		t.Fatalf("first page (size clamped to 3): kind %s page %d size %d total %d items %d", page.Kind, page.Page, page.Size, page.Total, len(page.Items))
	}
	next := restPage(t, s, url.Values{"search": {"consumer_name = 'cluster1'"}, "page": {"2"}, "size": {"3"}})
	byKeyset := restPage(t, s, url.Values{"search": {"consumer_name = 'cluster1'"}, "after": {page.Items[2].ID}, "size": {"3"}})
	if len(next.Items) != 1 || len(byKeyset.Items) != 1 || next.Items[0].ID != byKeyset.Items[0].ID {
		t.Fatalf("second page %d items, keyset page %d items", len(next.Items), len(byKeyset.Items))
	}

	checkFieldSelection(t, s, page.Items)

	for _, item := range append(page.Items, next.Items...) {
		w := bundleToWork(t, item)
		cached := source.work("cluster1", w.Name)
		if cached == nil || w.UID != cached.UID || w.Labels["app"] != w.Name || w.Annotations["note"] != "test" {
			t.Fatalf("work from the list %+v does not match the source's %+v", w.ObjectMeta, cached)
		}
		if manifestNames(w) != "cm-"+w.Name || appliedOf(w) != "cm-"+w.Name {
			t.Fatalf("work %s from the list has manifests %q and status %+v", w.Name, manifestNames(w), w.Status)
		}
		if item.Href != restapi.BasePath+"/resource-bundles/"+item.ID || item.Version != 1 || string(item.Status["ObservedVersion"]) != "1" {
			t.Fatalf("item %s: href %s version %d status %v", item.ID, item.Href, item.Version, item.Status)
		}
		// The status hash the list carries is the one a source computes over the status it rebuilds: it may
		// resync with it.
		if h, err := statushash.StatusHash(w); err != nil || string(item.Status["StatusHash"]) != strconv.Quote(h) {
			t.Fatalf("item %s: listed status hash %s, sdk-go's of the listed status %s (%v)", item.ID, item.Status["StatusHash"], h, err)
		}
	}

	out.Reset()
	if err := (&restapi.ConsumerListOptions{ClientOptions: client, Out: &out}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cluster1") || !strings.Contains(out.String(), "cluster2") {
		t.Fatalf("consumers list:\n%s", out.String())
	}
	if err := (&restapi.ConsumerDeleteOptions{ClientOptions: client, Name: "cluster2", Out: &out}).Run(ctx); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("delete of a consumer with works: %v", err)
	}
	if err := source.works("cluster2").Delete(ctx, "b1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, waitTimeout, "cluster2 to be deletable", func() bool {
		return (&restapi.ConsumerDeleteOptions{ClientOptions: client, Name: "cluster2", Out: &out}).Run(ctx) == nil
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	if line := scrape(t, s, "argocd_pull_server_connected_agents"); line != "argocd_pull_server_connected_agents "+strconv.Itoa(2) {
		t.Errorf("connected agents: %q", line)
	}
}

// TestRESTKeepsStatusesExact: a status listed through the REST API decodes to the status the agent reported,
// so a source that rebuilds its works from the list hashes it as the agent did (an integer above 2^53 too).
func TestRESTKeepsStatusesExact(t *testing.T) {
	big := int64(1<<53 + 1)
	work := realisticWork(t, "cluster1", 1)
	work.Status = realisticStatus(work, 1)
	work.Status.ResourceStatus.Manifests[0].StatusFeedbacks.Values = append(work.Status.ResourceStatus.Manifests[0].StatusFeedbacks.Values,
		workv1.FeedbackValue{Name: "replicas", Value: workv1.FieldValue{Type: workv1.Integer, Integer: &big}})
	reported, err := statushash.StatusHash(work)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(payload.ManifestBundleStatus{Conditions: work.Status.Conditions, ResourceStatus: work.Status.ResourceStatus.Manifests})
	if err != nil {
		t.Fatal(err)
	}
	out, err := presentBundle(store.Bundle{SpecRow: store.SpecRow{ID: "r1", Spec: []byte(`{"manifests":[]}`)}, Status: data,
		StatusVersion: 1, StatusSequence: 7})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := json.Marshal(out.Status)
	if err != nil {
		t.Fatal(err)
	}
	var status payload.ManifestBundleStatus
	if err := json.Unmarshal(listed, &status); err != nil {
		t.Fatal(err)
	}
	rebuilt := &workv1.ManifestWork{Status: workv1.ManifestWorkStatus{Conditions: status.Conditions,
		ResourceStatus: workv1.ManifestResourceStatus{Manifests: status.ResourceStatus}}}
	if got, err := statushash.StatusHash(rebuilt); err != nil || got != reported {
		t.Fatalf("the listed status hashes to %s (%v), the reported one to %s", got, err, reported)
	}
}

// TestPresentBundleShapes: a spec's empty fields are left out, a status's ObservedVersion and SequenceID are the
// server's whatever the agent sent, and a null status (valid JSON an agent may send) is rendered, not a failure.
func TestPresentBundleShapes(t *testing.T) {
	for _, tc := range []struct {
		name, spec, status, storedHash, want string
	}{
		{"empty spec fields", `{"manifests":[ ],"deleteOption":{},"manifestConfigs":null}`, "", "h9",
			`{"delete_option":null,"manifest_configs":null,"manifests":null,"status":null}`},
		{"spec fields kept", `{"manifests":[{"kind":"ConfigMap","data":{"n":12345678901234567890}}],"deleteOption":{"propagationPolicy":"Orphan"}}`, "", "h9",
			`{"delete_option":{"propagationPolicy":"Orphan"},"manifest_configs":null,"manifests":[{"kind":"ConfigMap","data":{"n":12345678901234567890}}],"status":null}`},
		{"null status", `{"manifests":[]}`, `null`, "h9",
			`{"delete_option":null,"manifest_configs":null,"manifests":null,"status":{"ObservedVersion":3,"SequenceID":"9","StatusHash":"h9"}}`},
		{"the server's versions", `{"manifests":[]}`, `{"conditions":[],"ObservedVersion":1,"SequenceID":"1","StatusHash":"x"}`, "h9",
			`{"delete_option":null,"manifest_configs":null,"manifests":null,"status":{"ObservedVersion":3,"SequenceID":"9","StatusHash":"h9","conditions":[]}}`},
		{"no stored hash", `{"manifests":[]}`, `{"conditions":[],"StatusHash":"x"}`, "",
			`{"delete_option":null,"manifest_configs":null,"manifests":null,"status":{"ObservedVersion":3,"SequenceID":"9","conditions":[]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := store.Bundle{SpecRow: store.SpecRow{ID: "r1", Spec: []byte(tc.spec)}, StatusVersion: 3, StatusSequence: 9, StatusHash: tc.storedHash}
			if tc.status != "" {
				b.Status = []byte(tc.status)
			}
			out, err := presentBundle(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(map[string]any{"manifests": out.Manifests, "delete_option": out.DeleteOption,
				"manifest_configs": out.ManifestConfigs, "status": out.Status})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// BenchmarkPresentBundles renders a page of 1,000 realistic resource bundles (an Application's work with its
// reported status) as a list answer is written, whole and with the fields the controller's list asks for.
func BenchmarkPresentBundles(b *testing.B) {
	page := make([]store.Bundle, 1000)
	for i := range page {
		w := benchWork(b, "cluster1", i)
		spec, err := json.Marshal(payload.ManifestBundle{Manifests: w.Spec.Workload.Manifests, DeleteOption: w.Spec.DeleteOption,
			ManifestConfigs: w.Spec.ManifestConfigs})
		if err != nil {
			b.Fatal(err)
		}
		meta, err := json.Marshal(w.ObjectMeta)
		if err != nil {
			b.Fatal(err)
		}
		st := realisticStatus(w, 1)
		status, err := json.Marshal(payload.ManifestBundleStatus{Conditions: st.Conditions, ResourceStatus: st.ResourceStatus.Manifests})
		if err != nil {
			b.Fatal(err)
		}
		page[i] = store.Bundle{SpecRow: store.SpecRow{ID: string(w.UID), Consumer: "cluster1", Source: "hub", Name: w.Name, Version: 1,
			Meta: meta, Spec: spec}, Status: status, StatusVersion: 1, StatusSequence: int64(i)}
	}
	lean := make([]store.Bundle, len(page))
	for i, bundle := range page {
		bundle.Spec = nil
		lean[i] = bundle
	}
	controllerFields, err := parseBundleFields("id,name,consumer_name,version,created_at,deleted_at,metadata,status")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		bundles []store.Bundle
		fields  map[string]bool
	}{{"whole", page, nil}, {"controller", lean, controllerFields}} {
		b.Run(bc.name, func(b *testing.B) {
			var bytes int
			for b.Loop() {
				items, err := presentBundles(bc.bundles, bc.fields)
				if err != nil {
					b.Fatal(err)
				}
				var out countingWriter
				if err := json.NewEncoder(&out).Encode(restapi.List[any]{Kind: "ResourceBundleList", Items: items}); err != nil {
					b.Fatal(err)
				}
				bytes = int(out)
			}
			b.ReportMetric(float64(bytes)/float64(len(bc.bundles)), "B/bundle")
		})
	}
}

// countingWriter counts the bytes written to it.
type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
