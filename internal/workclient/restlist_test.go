package workclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"

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
	works, _, err := (&restLister{client: c, source: "src", pageSize: 4}).list(context.Background())
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
