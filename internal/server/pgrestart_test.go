package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server/internal/testclients"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/server/store"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// updateRounds is how many times TestPostgresRestart updates every work after creating it.
const updateRounds = 4

// TestPostgresRestart kills PostgreSQL while specs and statuses flow between a source on one instance and
// agents on both, and starts it again on the same port with its data. Publishes fail while it is down and
// are retried, as the hub controller and the work agent do; the instances reconnect their pools and their
// notification feeds, reset their subscriptions and the clients resync. Afterwards every work is at its
// last version on its agent and at the source with the status of that version, a status reported while
// the database was down arrives, a work deleted across the outage is gone everywhere, and nothing else is.
func TestPostgresRestart(t *testing.T) {
	ctx := context.Background()
	db := testDB(t)
	a := startServer(t, testOptions(db, "a"))
	b := startServer(t, testOptions(db, "b"))
	clusters := []string{"cluster1", "cluster2", "cluster3"}
	createConsumer(t, a, clusters...)
	agents := map[string]*remoteClient{
		"cluster1": startRemoteAgent(t, b.AgentAddr(), "cluster1"),
		"cluster2": startRemoteAgent(t, b.AgentAddr(), "cluster2"),
		"cluster3": startRemoteAgent(t, a.AgentAddr(), "cluster3"),
	}
	source := startRemoteSource(t, a, "hub")
	works := []string{"w0", "w1", "w2", "w3", "del"}

	// publish retries a publish until the server takes it, as a controller's requeue does.
	var published, failed atomic.Int64
	publish := func(what string, call func() error) error {
		deadline := time.Now().Add(2 * waitTimeout)
		for {
			err := call()
			if err == nil {
				published.Add(1)
				return nil
			}
			failed.Add(1)
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	configMaps := func(name string, round int) string { return fmt.Sprintf("cm-%s-r%d", name, round) }
	for _, c := range clusters {
		for _, w := range works {
			if err := publish("create "+c+"/"+w, func() error { return source.Apply(ctx, c, w, configMaps(w, 0)) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range clusters {
		for _, w := range works {
			remoteWork(t, source, "the first status", c, w, appliedAs(1, configMaps(w, 0)))
		}
	}

	// The updates flow while PostgreSQL is killed: every round updates every work; the third deletes "del".
	// The rounds after the first wait for the kill, so that they run into the outage however fast they are.
	done, killed := make(chan error, 1), make(chan struct{})
	go func() {
		done <- func() error {
			for round := 1; round <= updateRounds; round++ {
				if round == 2 {
					<-killed
				}
				for _, c := range clusters {
					for _, w := range works {
						var call func() error
						switch {
						case w == "del" && round == 3:
							call = func() error { return source.Delete(ctx, c, w) }
						case w == "del" && round > 3:
							continue
						default:
							call = func() error { return source.Apply(ctx, c, w, configMaps(w, round)) }
						}
						if err := publish(fmt.Sprintf("round %d of %s/%s", round, c, w), call); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}()
	}()
	start := published.Load()
	testutil.EventuallyTrue(t, waitTimeout, "some updates to flow", func() bool { return published.Load() >= start+int64(len(works)) })
	pg.Kill()
	close(killed)
	testutil.EventuallyTrue(t, waitTimeout, "publishes to fail", func() bool { return failed.Load() > 0 })
	// A status that changes while the database is down.
	if err := agents["cluster2"].SetMessage(ctx, "w1", "reported during the outage"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * waitTimeout):
		t.Fatal("the updates did not finish")
	}

	last := int64(1 + updateRounds)
	for _, c := range clusters {
		for _, w := range works {
			if w == "del" {
				remoteWork(t, agents[c], "the deleted work to leave the agent", c, w, gone)
				remoteWork(t, source, "the deleted work to leave the source", c, w, gone)
				continue
			}
			want := configMaps(w, updateRounds)
			if c == "cluster2" && w == "w1" {
				want = "reported during the outage"
			}
			remoteWork(t, agents[c], "the last version at the agent", c, w, func(s testclients.WorkState) bool {
				return s.Exists && s.Generation == last && s.Manifests == configMaps(w, updateRounds)
			})
			remoteWork(t, source, "the status of the last version at the source", c, w, appliedAs(last, want))
		}
	}
	page, err := a.store.ListBundles(ctx, store.BundleQuery{Source: "hub", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range page.Items {
		if r.Version != last || r.StatusVersion != last || r.DeletedAt != nil {
			t.Errorf("resource %s/%s: version %d, status version %d, deleted %v; want %d, %d, not deleted",
				r.Consumer, r.Name, r.Version, r.StatusVersion, r.DeletedAt, last, last)
		}
		rows = append(rows, r.Consumer+"/"+r.Name)
	}
	if page.Total != len(clusters)*(len(works)-1) {
		t.Errorf("the database holds %d resources, want %d: %s", page.Total, len(clusters)*(len(works)-1), strings.Join(rows, " "))
	}
	if s := scrape(t, a, "argocd_pull_server_stream_resets_total"); s == "argocd_pull_server_stream_resets_total 0" || s == "" {
		t.Errorf("instance a did not reset its subscriptions after the outage: %q", s)
	}
}

// TestStartBeforeDatabase: a server started while PostgreSQL is down waits for it instead of exiting. Meanwhile
// it answers /healthz, says on /readyz what it waits for and refuses the REST API; it serves once PostgreSQL
// is up. When PostgreSQL goes away again, /readyz is false until it is back.
func TestStartBeforeDatabase(t *testing.T) {
	ctx := context.Background()
	o := testOptions(testDB(t), "a")
	ports, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = fmt.Sprintf("127.0.0.1:%d", ports[0]),
		fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + o.HTTPAddress + path)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	pg.Kill()
	pgDown := true
	t.Cleanup(func() {
		if pgDown {
			if err := pg.Start(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	s := New(o)
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	t.Cleanup(s.Stop)
	testutil.EventuallyTrue(t, waitTimeout, "health while waiting for the database", func() bool {
		code, _ := get("/healthz")
		return code == http.StatusOK
	})
	// Not ready, first while starting, then saying what it waits for once its first attempt failed.
	testutil.Eventually(t, "/readyz saying the server waits for the database", func() error {
		if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the database") {
			return fmt.Errorf("/readyz while the database is down: %d %q", code, body)
		}
		return nil
	})
	if code, body := get(restapi.BasePath + "/consumers"); code != http.StatusServiceUnavailable {
		t.Fatalf("REST API while the database is down: %d %q", code, body)
	}
	time.Sleep(time.Second)
	select {
	case err := <-started:
		t.Fatalf("Start returned while the database was down: %v", err)
	default:
	}

	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pgDown = false
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the server did not start once the database was up")
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz once started: %d %q", code, body)
	}

	pg.Kill()
	pgDown = true
	testutil.EventuallyTrue(t, waitTimeout, "not ready while the database is down", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pgDown = false
	testutil.EventuallyTrue(t, waitTimeout, "ready once the database is back", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
}
