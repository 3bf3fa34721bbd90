package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server/internal/testclients"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// Clients that reconnect run out of process: sdk-go v1.3.0's gRPC transport writes its subscription in
// Subscribe under its lock and reads it in Receive and in its receiver goroutine without, so a client that
// reconnects in a test binary built with -race fails the test for a race that is not ours (docs/server.md).
// The testclient command runs the same clients (testclients) in a process built without the race detector;
// the server stays in the test process, under the race detector.

var testclientBuild struct {
	once sync.Once
	path string
	err  error
}

// testclientBinary builds the testclient command once per test binary, without the race detector.
func testclientBinary(t testing.TB) string {
	t.Helper()
	testclientBuild.once.Do(func() {
		root, err := loopback.ModuleRoot()
		if err != nil {
			testclientBuild.err = err
			return
		}
		dir, err := os.MkdirTemp("", "server-testclient-")
		if err != nil {
			testclientBuild.err = err
			return
		}
		out := filepath.Join(dir, "testclient")
		cmd := exec.Command("go", "build", "-race=false", "-o", out, "./internal/server/internal/testclients/testclient")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			testclientBuild.err = err
			testclientBuild.path = string(b)
			return
		}
		testclientBuild.path = out
	})
	if testclientBuild.err != nil {
		t.Fatalf("build the testclient command: %v: %s", testclientBuild.err, testclientBuild.path)
	}
	return testclientBuild.path
}

// remoteClient is a testclient process and its controls.
type remoteClient struct {
	*testclients.Remote
	proc *loopback.Process
}

// startRemote starts the testclient command with a gRPC config for addr and waits until it serves its
// controls. It is stopped when the test ends, and its log shows when the test fails.
func startRemote(t *testing.T, name, addr string, args ...string) *remoteClient {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "grpc.yaml")
	if err := os.WriteFile(config, []byte("url: "+addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "addr")
	proc, err := loopback.StartProcess(loopback.ProcessSpec{Name: name, Path: testclientBinary(t),
		Args:    append([]string{"-grpc-config=" + config, "-addr-file=" + addrFile, "-v=2"}, args...),
		LogPath: filepath.Join(dir, name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop(5 * time.Second)
		if t.Failed() {
			logTail(t, proc.LogPath)
		}
	})
	var remote *testclients.Remote
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = proc.WaitReady(ctx, func(ctx context.Context) error {
		b, err := os.ReadFile(addrFile) //nolint:gosec // the test's own file
		if err != nil {
			return err
		}
		remote = testclients.NewRemote(string(b))
		return remote.Healthy(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return &remoteClient{Remote: remote, proc: proc}
}

// startRemoteAgent runs an agent of the cluster against an agent endpoint in its own process.
func startRemoteAgent(t *testing.T, agentAddr, cluster string) *remoteClient {
	t.Helper()
	return startRemote(t, "agent-"+cluster, agentAddr, "-mode=agent", "-cluster="+cluster)
}

// startRemoteSource runs the hub controller's grpc transport against a server in its own process.
func startRemoteSource(t *testing.T, s *Server, sourceID string) *remoteClient {
	t.Helper()
	return startRemote(t, "source-"+sourceID, s.SourceAddr(), "-mode=source", "-source-id="+sourceID,
		"-rest-url=http://"+s.HTTPAddr())
}

// logTail logs the last lines of a client's log.
func logTail(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // the test's own file
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("last lines of %s:\n%s", path, strings.Join(lines[max(0, len(lines)-40):], "\n"))
}

// remoteWork polls a client for a work until it is in the wanted state.
func remoteWork(t *testing.T, c *remoteClient, what, cluster, name string, want func(testclients.WorkState) bool) {
	t.Helper()
	testutil.EventuallyWithin(t, waitTimeout, what, func() error {
		st, err := c.Work(context.Background(), cluster, name)
		if err == nil && want(st) {
			return nil
		}
		return fmt.Errorf("%s/%s is %+v (%v)", cluster, name, st, err)
	})
}

// appliedAs is the wanted state of a work applied at a generation with a message.
func appliedAs(generation int64, message string) func(testclients.WorkState) bool {
	return func(s testclients.WorkState) bool {
		return s.Exists && !s.Deleting && s.Generation == generation && s.AppliedGeneration == generation && s.Applied == message
	}
}

// gone is the wanted state of a work that no longer exists.
func gone(s testclients.WorkState) bool { return !s.Exists }
