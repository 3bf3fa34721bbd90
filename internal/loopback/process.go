package loopback

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// Process is a child process started by the test environment. Its output goes to a log file so that a
// failing test can point at it, and it is killed with its whole process group when it is stopped or when
// the test binary dies.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// ProcessSpec describes a process to start.
type ProcessSpec struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	Dir     string
	LogPath string
	// Credential runs the process as another user (PostgreSQL refuses to run as root).
	Credential *syscall.Credential
	// CleanEnv gives the process Env alone, without this process's environment (as a container has).
	CleanEnv bool
}

// StartProcess starts the process described by spec.
func StartProcess(spec ProcessSpec) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o750); err != nil {
		return nil, fmt.Errorf("create log dir for %s: %w", spec.Name, err)
	}
	logFile, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", spec.Name, err)
	}
	cmd := exec.Command(spec.Path, spec.Args...) //nolint:gosec // the test environment starts the binaries it built
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	if spec.CleanEnv {
		cmd.Env = spec.Env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.Credential,
	}

	// Pdeathsig fires when the thread that forked the child exits; pin the fork to a thread that lives
	// as long as the process does not matter here because Go keeps its threads, but lock it for the fork.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Process{Name: spec.Name, LogPath: spec.LogPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// ExitError is nil while the process runs; once it has exited, an error that names it, says how it ended and
// where its log is.
func (p *Process) ExitError() error {
	if p.Running() {
		return nil
	}
	return fmt.Errorf("%s exited (%v); log: %s", p.Name, p.err, p.LogPath)
}

// Running reports whether the process is still running.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop asks the process group to terminate and kills it if it has not exited within the grace period.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Signal sends sig to the process alone (not its group: a server's children take their orders from it) and
// kills the group if the process has not exited within the grace period.
func (p *Process) Signal(sig syscall.Signal, grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill kills the process group at once, as a crash would.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// WaitReady polls check until it succeeds, the process exits or the context ends; the context's deadline is
// the only limit (see WithProgress).
func (p *Process) WaitReady(ctx context.Context, check func(context.Context) error) error {
	err := waitFor(ctx, p.Name+" to be ready", 50*time.Millisecond, p.done, check)
	if err == nil {
		return nil
	}
	if !p.Running() {
		return fmt.Errorf("%s exited before it was ready (%v); log: %s\n%s", p.Name, p.err, p.LogPath, tail(p.LogPath, 20))
	}
	return fmt.Errorf("%w; log: %s", err, p.LogPath)
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path) //nolint:gosec // our own log file
	if err != nil {
		return ""
	}
	lines := 0
	for i := len(data) - 1; i >= 0; i-- {
		if data[i] == '\n' {
			lines++
			if lines > n {
				return string(data[i+1:])
			}
		}
	}
	return string(data)
}
