package loopback

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExitError: a running process has no exit error; one that exited has an error that names it, says how it
// ended and where its log is (a benchmark stops on it instead of waiting for a fleet whose controller died).
func TestExitError(t *testing.T) {
	dir := t.TempDir()
	start := func(name, script string) *Process {
		p, err := StartProcess(ProcessSpec{Name: name, Path: "/bin/sh", Args: []string{"-c", script},
			LogPath: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Kill() })
		return p
	}
	running := start("sleeper", "sleep 30")
	if err := running.ExitError(); err != nil {
		t.Errorf("a running process has an exit error: %v", err)
	}
	crashed := start("crasher", "echo 'fatal error: concurrent map read and map write'; exit 2")
	select {
	case <-crashed.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
	err := crashed.ExitError()
	if err == nil || !strings.Contains(err.Error(), "crasher exited (exit status 2)") || !strings.Contains(err.Error(), "crasher.log") {
		t.Errorf("exit error: %v", err)
	}
}
