package testutil

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"testing"
)

// Child is this test binary run again as a child process, for a test that measures its own process's memory
// while the child holds the other side (clients, simulated clusters). The child runs no test: the package's
// TestMain sees the environment it was given and does the child's part.
type Child struct {
	Cmd *exec.Cmd
	// Lines is the child's output, a line at a time; Input is its standard input.
	Lines *bufio.Scanner
	Input io.WriteCloser
}

// StartChild starts the child with env added to this process's environment; it is killed when the test ends.
func StartChild(ctx context.Context, t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$") //nolint:gosec // this test binary
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &Child{Cmd: cmd, Lines: bufio.NewScanner(stdout), Input: stdin}
}
