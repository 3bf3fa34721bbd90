package store

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var pg *loopback.Postgres

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "store-pg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pg, err = loopback.StartPostgres(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Stop()
	return m.Run()
}

// newTestStore creates a database for the test, migrates it and returns a store on it.
func newTestStore(t *testing.T, instance string) (Store, string) {
	t.Helper()
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, testutil.DatabaseName(t))
	if err != nil {
		t.Fatal(err)
	}
	return openTestStore(t, url, instance), url
}

func openTestStore(t *testing.T, url, instance string) Store {
	t.Helper()
	s, err := New(context.Background(), Config{URL: url, InstanceID: instance, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// connect opens a connection of the test's own to the database at url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func spec(id, consumer string, version int64, body string) SpecWrite {
	return SpecWrite{ID: id, Consumer: consumer, Source: "src", Name: "work-" + id, Version: version,
		Meta: []byte(`{"name":"work-` + id + `"}`), Spec: []byte(body), Hash: body, Op: OpCreate}
}

func mustApplySpecs(t *testing.T, s Store, writes ...SpecWrite) []SpecResult {
	t.Helper()
	res, err := s.ApplySpecs(context.Background(), writes, false)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	s, url := newTestStore(t, "a")
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other, err := New(context.Background(), Config{URL: url, InstanceID: "b"})
			if err != nil {
				errs <- err
				return
			}
			defer other.Close()
			errs <- other.Migrate(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestPayloadCompression: the migrations store specs and statuses with lz4 where the server supports it,
// and writes are durable whatever the database's default.
func TestPayloadCompression(t *testing.T) {
	ctx := context.Background()
	s, url := newTestStore(t, "a")
	conn := connect(t, url)
	var methods string
	if err := conn.QueryRow(ctx, `SELECT string_agg(attname || '=' || attcompression::text, ',' ORDER BY attname)
		FROM pg_attribute WHERE attrelid = 'resources'::regclass AND attname IN ('spec', 'status')`).Scan(&methods); err != nil {
		t.Fatal(err)
	}
	if methods != "spec=l,status=l" {
		if _, err := conn.Exec(ctx, "ALTER TABLE resources ALTER COLUMN status SET COMPRESSION lz4"); err == nil {
			t.Fatalf("compression %s after the migrations, though this server supports lz4", methods)
		}
	}
	var syncCommit string
	if err := s.(*pgStore).pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit); err != nil {
		t.Fatal(err)
	}
	if syncCommit != "on" {
		t.Errorf("the store's sessions run with synchronous_commit=%s; acknowledged writes could be lost", syncCommit)
	}
}

func TestConsumers(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, "a")
	c, err := s.CreateConsumer(ctx, Consumer{Name: "cluster1", Labels: map[string]string{"env": "dev"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(ctx, Consumer{Name: "cluster1"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	got, err := s.GetConsumer(ctx, c.ID)
	if err != nil || got.Name != "cluster1" || got.Labels["env"] != "dev" {
		t.Fatalf("get by id: %+v, %v", got, err)
	}
	if err := s.EnsureConsumer(ctx, "cluster2"); err != nil {
		t.Fatal(err)
	}
	list, total, err := s.ListConsumers(ctx, 0, 1)
	if err != nil || total != 2 || len(list) != 1 || list[0].Name != "cluster1" {
		t.Fatalf("list: %+v total %d, %v", list, total, err)
	}
	mustApplySpecs(t, s, spec("r1", "cluster1", 0, `{"a":1}`))
	if err := s.DeleteConsumer(ctx, "cluster1"); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete with resources: got %v, want ErrConflict", err)
	}
	if err := s.DeleteConsumer(ctx, "cluster2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetConsumer(ctx, "cluster2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: got %v, want ErrNotFound", err)
	}
}

func TestSpecAndStatusLifecycle(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, "a")
	if err := s.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	res := mustApplySpecs(t, s, spec("r1", "c1", 0, `{"a":1}`), spec("r2", "nope", 0, `{"a":1}`))
	if res[0].Err != nil || !res[0].Send || res[0].Row.Version != 1 {
		t.Fatalf("create: %+v", res[0])
	}
	if !errors.Is(res[1].Err, ErrConsumerNotFound) {
		t.Fatalf("unknown consumer: %+v", res[1])
	}
	upd := spec("r1", "c1", 0, `{"a":2}`)
	upd.Op = OpUpdate
	if res = mustApplySpecs(t, s, upd); res[0].Row.Version != 2 || !res[0].Send {
		t.Fatalf("update: %+v", res[0])
	}

	st, err := s.ApplyStatuses(ctx, []StatusWrite{
		{ID: "r1", Consumer: "c1", Version: 1, Sequence: 10, Hash: "h1", Status: []byte(`{}`)},
		{ID: "r1", Consumer: "c1", Version: 2, Sequence: 11, Hash: "h2", Status: []byte(`{"x":1}`)},
		{ID: "r1", Consumer: "c1", Version: 2, Sequence: 11, Hash: "h2", Status: []byte(`{"x":1}`)},
		{ID: "r1", Consumer: "other", Version: 2, Sequence: 12, Hash: "h3", Status: []byte(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(st[0].Err, ErrStale) || st[1].Outcome != StatusApplied || st[2].Outcome != StatusIdentical ||
		!errors.Is(st[3].Err, ErrForbidden) {
		t.Fatalf("statuses: %+v", st)
	}
	statuses, err := s.LoadStatuses(ctx, []string{"r1"})
	if err != nil || len(statuses) != 1 || statuses[0].Hash != "h2" || statuses[0].Source != "src" {
		t.Fatalf("load statuses: %+v, %v", statuses, err)
	}
	if b, err := s.GetBundle(ctx, "r1"); err != nil || b.StatusHash != "h2" || b.StatusSequence != 11 || string(b.Status) != `{"x":1}` {
		t.Fatalf("bundle with its status: %+v, %v", b, err)
	}

	del := spec("r1", "c1", 0, "")
	del.Op = OpDelete
	if res = mustApplySpecs(t, s, del); !res[0].Send || res[0].Row.Version != 3 || res[0].Row.DeletedAt == nil {
		t.Fatalf("delete: %+v", res[0])
	}
	versions, err := s.SpecVersions(ctx, "c1")
	if err != nil || len(versions) != 1 || versions[0] != (SpecVersion{ID: "r1", Version: 3, Deleting: true}) {
		t.Fatalf("spec versions after delete: %+v, %v", versions, err)
	}
	specs, err := s.LoadSpecs(ctx, []string{"r1"})
	if err != nil || len(specs) != 1 || specs[0].DeletedAt == nil || string(specs[0].Spec) != `{"a":2}` {
		t.Fatalf("load specs after delete: %+v, %v", specs, err)
	}
	st, err = s.ApplyStatuses(ctx, []StatusWrite{{ID: "r1", Consumer: "c1", Version: 3, Sequence: 20, Hash: "gone", Deleted: true}})
	if err != nil || st[0].Outcome != StatusRemoved {
		t.Fatalf("confirm delete: %+v, %v", st, err)
	}
	if _, err := s.GetBundle(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bundle after removal: %v", err)
	}
	if res = mustApplySpecs(t, s, del); !res[0].Gone {
		t.Fatalf("delete of a removed resource: %+v", res[0])
	}
}

func TestConcurrentCreatesOfOneResource(t *testing.T) {
	ctx := context.Background()
	a, url := newTestStore(t, "a")
	b := openTestStore(t, url, "b")
	if err := a.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([][]SpecResult, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := []Store{a, b}[i%2]
			res, err := st.ApplySpecs(ctx, []SpecWrite{spec("r1", "c1", 0, fmt.Sprintf(`{"n":%d}`, i))}, false)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res
		}()
	}
	wg.Wait()
	versions := map[int64]bool{}
	for _, res := range results {
		if res == nil || res[0].Err != nil {
			t.Fatalf("result: %+v", res)
		}
		if versions[res[0].Row.Version] {
			t.Fatalf("two writers committed version %d", res[0].Row.Version)
		}
		versions[res[0].Row.Version] = true
	}
	bundle, err := a.GetBundle(ctx, "r1")
	if err != nil || bundle.Version != int64(len(results)) {
		t.Fatalf("final bundle version %d, want %d (%v)", bundle.Version, len(results), err)
	}
}

func TestListBundlesPaging(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, "a")
	for _, c := range []string{"c1", "c2"} {
		if err := s.EnsureConsumer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var writes []SpecWrite
	for i := range 25 {
		writes = append(writes, spec(fmt.Sprintf("r%02d", i), []string{"c1", "c2"}[i%2], 0, `{}`))
	}
	mustApplySpecs(t, s, writes...)
	page, err := s.ListBundles(ctx, BundleQuery{Consumer: "c1", Source: "src", Limit: 5, Offset: 5})
	if err != nil || page.Total != 13 || len(page.Items) != 5 || page.Items[0].ID != "r10" {
		t.Fatalf("offset page: %+v, %v", page, err)
	}
	page, err = s.ListBundles(ctx, BundleQuery{Consumer: "c1", Limit: 5, After: "r18"})
	if err != nil || len(page.Items) != 3 || page.Items[0].ID != "r20" {
		t.Fatalf("keyset page: %+v, %v", page, err)
	}
	// Without the specs: the same page, every column but the spec.
	lean, err := s.ListBundles(ctx, BundleQuery{Consumer: "c1", Limit: 5, After: "r18", WithoutSpec: true})
	if err != nil || len(lean.Items) != len(page.Items) {
		t.Fatalf("keyset page without specs: %+v, %v", lean, err)
	}
	for i, b := range lean.Items {
		if b.Spec != nil || page.Items[i].Spec == nil {
			t.Errorf("item %d: spec %q without the specs, %q with them", i, b.Spec, page.Items[i].Spec)
		}
		b.Spec = page.Items[i].Spec
		if !reflect.DeepEqual(b, page.Items[i]) {
			t.Errorf("item %d without the spec %+v, with it %+v", i, b, page.Items[i])
		}
	}
}

func TestNotificationsReachOtherInstances(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, url := newTestStore(t, "a")
	b := openTestStore(t, url, "b")
	if err := a.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	got := make(chan Notification, 10)
	connected := make(chan struct{}, 1)
	go func() {
		_ = b.Listen(ctx, func(context.Context) { connected <- struct{}{} }, func(_ context.Context, ns []Notification) {
			for _, n := range ns {
				got <- n
			}
		})
	}()
	<-connected
	mustApplySpecs(t, a, spec("r1", "c1", 0, `{}`))
	select {
	case n := <-got:
		if n.Kind != KindSpec || n.ID != "r1" || n.Consumer != "c1" || n.Version != 1 {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
}

// TestFeedAndPoolAfterPartition: the network between an instance and the database drops its traffic for a
// moment without resetting anything, so that its connections are dead and nobody tells it. The notification
// feed notices by itself (a ping when it has been quiet), connects again — the server then has its clients
// resync — and notifications flow; the pool's dead connections are not handed out again.
func TestFeedAndPoolAfterPartition(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, url := newTestStore(t, "a")
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := loopback.StartRelay(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	u.Host = relay.Addr
	b := openTestStore(t, u.String(), "b")
	if err := a.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	got := make(chan Notification, 10)
	connected := make(chan struct{}, 2)
	go func() {
		_ = b.Listen(ctx, func(context.Context) { connected <- struct{}{} }, func(_ context.Context, ns []Notification) {
			for _, n := range ns {
				got <- n
			}
		})
	}()
	<-connected
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	relay.Partition()
	// An operation in flight on a connection the partition broke fails when the feed finds the database
	// unreachable, or at its own deadline at the latest; it never waits on the dead connection beyond that.
	inFlight := make(chan time.Duration, 1)
	go func() {
		begun := time.Now()
		_, _, err := b.ListConsumers(ctx, 0, 10)
		if err == nil {
			t.Error("an operation across the partition succeeded")
		}
		inFlight <- time.Since(begun)
	}()
	time.Sleep(time.Second)
	relay.Restore()
	start := time.Now()
	select {
	case <-connected:
		t.Logf("the feed connected again %s after the partition", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the feed did not notice its dead connection")
	}
	if took := <-inFlight; took > maxOperation+2*time.Second {
		t.Errorf("the operation in flight failed after %s", took)
	}
	mustApplySpecs(t, a, spec("r1", "c1", 0, `{}`))
	select {
	case n := <-got:
		if n.ID != "r1" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the partition")
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	time.Sleep(1100 * time.Millisecond) // the pooled connections have been idle for more than a second
	if _, _, err := b.ListConsumers(pctx, 0, 10); err != nil {
		t.Fatalf("a query after the partition: %v", err)
	}
}

func TestInstancesAndSweeps(t *testing.T) {
	ctx := context.Background()
	a, url := newTestStore(t, "a")
	b := openTestStore(t, url, "b")
	registerInstances(t, a, b)
	if lead, err := a.IsLeader(ctx, time.Minute); err != nil || !lead {
		t.Fatalf("a leads: %v %v", lead, err)
	}
	if n, err := b.LiveInstances(ctx, time.Minute); err != nil || n != 2 {
		t.Fatalf("live: %d %v", n, err)
	}
	if err := a.RemoveInstance(ctx); err != nil {
		t.Fatal(err)
	}
	if lead, err := b.IsLeader(ctx, time.Minute); err != nil || !lead {
		t.Fatalf("b leads after a left: %v %v", lead, err)
	}

	if err := a.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	mustApplySpecs(t, a, spec("r1", "c1", 0, `{}`))
	if list, err := a.RepublishUndelivered(ctx, time.Hour, 10); err != nil || len(list) != 0 {
		t.Fatalf("republish of a fresh spec: %+v %v", list, err)
	}
	list, err := a.RepublishUndelivered(ctx, 0, 10)
	if err != nil || len(list) != 1 || list[0].ID != "r1" {
		t.Fatalf("republish: %+v %v", list, err)
	}
	if n, err := a.CountUndelivered(ctx, 0); err != nil || n != 1 {
		t.Fatalf("undelivered: %d %v", n, err)
	}
	del := spec("r1", "c1", 0, "")
	del.Op = OpDelete
	mustApplySpecs(t, a, del)
	n, stuck, err := a.StuckDeletes(ctx, 0, 10)
	if err != nil || n != 1 || len(stuck) != 1 || stuck[0].ID != "r1" {
		t.Fatalf("stuck deletes: %d %+v %v", n, stuck, err)
	}
}

// TestSweepQueriesUseIndexes plans the sweep's queries, which every server runs every 30 s, with sequential scans
// priced out: each must read an index of the rows it looks for, not the whole table, which at 150,000 resources
// took the undelivered count 75-125 ms before it had one. A query whose filter no longer matches an index's
// predicate, or an index dropped, shows as a sequential scan of resources.
func TestSweepQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	s, url := newTestStore(t, "a")
	if err := s.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		mustApplySpecs(t, s, spec(fmt.Sprintf("r%d", i), "c1", 0, `{}`))
	}
	conn := connect(t, url)
	if _, err := conn.Exec(ctx, "ANALYZE resources"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name, query, index string
		args               []any
	}{
		{"republish undelivered", republishUndeliveredQuery, "resources_undelivered_idx", []any{int64(1000), 10}},
		{"count undelivered", countUndeliveredQuery, "resources_undelivered_age_idx", []any{int64(1000)}},
		{"count stuck deletes", countStuckDeletesQuery, "resources_deleting_idx", []any{int64(1000)}},
		{"list stuck deletes", listStuckDeletesQuery, "resources_deleting_idx", []any{int64(1000), 10}},
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q.query, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan on resources") || !strings.Contains(plan, q.index) {
			t.Errorf("%s: want a scan of %s, not of the table; plan:\n%s", q.name, q.index, plan)
		}
	}
}

// TestAgentSubscriptions: a consumer counts the agent subscriptions open on the live instances; a subscription
// forgotten, or its instance gone, no longer counts.
func TestAgentSubscriptions(t *testing.T) {
	ctx := context.Background()
	a, url := newTestStore(t, "a")
	b := openTestStore(t, url, "b")
	registerInstances(t, a, b)
	if err := a.EnsureConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	agents := func() int {
		t.Helper()
		c, err := b.GetConsumer(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		return c.ConnectedAgents
	}
	if n := agents(); n != 0 {
		t.Fatalf("agents before any subscription: %d", n)
	}
	onA, err := a.AddAgentSubscription(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddAgentSubscription(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if n := agents(); n != 2 {
		t.Fatalf("agents with a subscription on each instance: %d", n)
	}
	list, _, err := a.ListConsumers(ctx, 0, 10)
	if err != nil || len(list) != 1 || list[0].ConnectedAgents != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := a.RemoveAgentSubscription(ctx, onA); err != nil {
		t.Fatal(err)
	}
	if n := agents(); n != 1 {
		t.Fatalf("agents after one unsubscribed: %d", n)
	}
	if err := b.RemoveInstance(ctx); err != nil {
		t.Fatal(err)
	}
	if n := agents(); n != 0 {
		t.Fatalf("agents after their instance left: %d", n)
	}
	if c, err := a.CreateConsumer(ctx, Consumer{Name: "c2"}); err != nil || c.ConnectedAgents != 0 {
		t.Fatalf("create: %+v %v", c, err)
	}
}

// registerInstances records the stores' instances as live.
func registerInstances(t *testing.T, stores ...Store) {
	t.Helper()
	for _, s := range stores {
		if err := s.RegisterInstance(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
