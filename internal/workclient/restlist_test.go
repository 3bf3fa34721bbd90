package workclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
)

// TestListWhileWorksAreRemoved: works removed between two pages of the list (the agents confirming a mass
// delete while a restarted controller lists) must not push the rest out of the pages. By page number, the
// second page began past works that had moved up into the first, and the controller never saw them: they
// stayed on the server, orphaned.
func TestListWhileWorksAreRemoved(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("id-%02d", i))
	}
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		size, _ := strconv.Atoi(q.Get("size"))
		page, _ := strconv.Atoi(q.Get("page"))
		start := (page - 1) * size
		if after := q.Get("after"); after != "" {
			start = sort.SearchStrings(ids, after)
			if start < len(ids) && ids[start] == after {
				start++
			}
		}
		end := min(start+size, len(ids))
		start = min(start, end)
		out := restapi.List[bundle]{Kind: "ResourceBundleList", Page: page, Total: len(ids)}
		for _, id := range ids[start:end] {
			out.Items = append(out.Items, bundle{ID: id, Name: "w-" + id, ConsumerName: "c1", Version: 1})
		}
		out.Size = len(out.Items)
		_ = json.NewEncoder(w).Encode(out)
		// After the first page, the first three works are confirmed deleted and removed.
		if requests++; requests == 1 {
			ids = ids[3:]
		}
	}))
	defer srv.Close()
	c, err := restapi.New(restapi.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var works []*workv1.ManifestWork
	err = (&restLister{client: c, source: "src", pageSize: 4}).each(context.Background(), func(w *workv1.ManifestWork, _ string) error {
		works = append(works, w)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, w := range works {
		listed[string(w.UID)] = true
	}
	for _, id := range ids {
		if !listed[id] {
			t.Errorf("work %s was on the server the whole time and is not listed (listed %d: %v)", id, len(works), listed)
		}
	}
}

// TestListStoresAsItGoes: a (re)started controller stores the works page by page as the list comes, and tells
// its handlers once the list is whole. Holding the whole list until it ended was 1.1 GB of a restarted
// controller's heap at 150,000 works. A list that fails midway is forgotten: a work removed before the next
// attempt does not stay in the store.
func TestListStoresAsItGoes(t *testing.T) {
	const size = 4
	var mu sync.Mutex
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("id-%02d", i))
	}
	g := &GRPC{store: newWorkStore(), sourceID: "src", notListed: fmt.Errorf("listing")}
	attempts, storedBeforeLastPage := 0, -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		start := 0
		if after := r.URL.Query().Get("after"); after != "" {
			start = sort.SearchStrings(ids, after) + 1
		} else {
			attempts++
		}
		if start > 0 && attempts == 1 {
			// The first attempt fails after its first page, and id-01 is removed before the next.
			ids = slices.DeleteFunc(ids, func(id string) bool { return id == "id-01" })
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		end := min(start+size, len(ids))
		start = min(start, end)
		if start > 0 && start < end && end == len(ids) {
			g.store.mu.RLock()
			storedBeforeLastPage = len(g.store.byKey)
			g.store.mu.RUnlock()
		}
		out := restapi.List[bundle]{Kind: "ResourceBundleList", Total: len(ids)}
		for _, id := range ids[start:end] {
			out.Items = append(out.Items, bundle{ID: id, Name: "w-" + id, ConsumerName: "c1", Version: 1})
		}
		out.Size = len(out.Items)
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	c, err := restapi.New(restapi.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	g.lister = &restLister{client: c, source: "src", pageSize: size}
	var added []string
	reg, err := g.store.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		added = append(added, string(obj.(*workv1.ManifestWork).UID))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if reg.HasSynced() {
		t.Fatal("a handler reports synced before the works are listed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.listWorks(ctx); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("listed in %d attempts, want 2 (the first one failing)", attempts)
	}
	if want := 2 * size; storedBeforeLastPage != want {
		t.Errorf("%d works stored when the last page was asked for, want the %d of the pages before it", storedBeforeLastPage, want)
	}
	var stored []string
	for _, w := range g.store.byKey {
		stored = append(stored, string(w.meta.UID))
	}
	slices.Sort(stored)
	slices.Sort(added)
	if !slices.Equal(stored, ids) || !slices.Equal(added, ids) {
		t.Errorf("stored %v, handler told of %v; want the works on the server: %v", stored, added, ids)
	}
	if !reg.HasSynced() || !g.store.HasSynced() {
		t.Errorf("after the list: handler synced %v, store synced %v", reg.HasSynced(), g.store.HasSynced())
	}
}
