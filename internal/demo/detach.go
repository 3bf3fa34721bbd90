package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// detach starts the demo in the foreground as a background process of its own session, with its output in
// <dir>/demo.log, shows that output until the fleet is ready, and returns leaving it running.
func (o *Options) detach(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", o.Dir, err)
	}
	logPath := filepath.Join(filepath.Dir(o.Dir), filepath.Base(o.Dir)+".log")
	logFile, err := os.Create(logPath) //nolint:gosec // the demo's own log
	if err != nil {
		return fmt.Errorf("create %s: %w", logPath, err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(self, "demo", "--dir", o.Dir, "--clusters", strconv.Itoa(o.Clusters), //nolint:gosec // our own binary
		"--transport", o.Transport, "--cmp="+strconv.FormatBool(o.CMP), "--timeout", o.Timeout.String())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the demo in the background: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return o.followLog(ctx, logPath, exited)
}

// followLog copies the detached demo's log to the output until the ready marker, or fails when it exits.
func (o *Options) followLog(ctx context.Context, path string, exited <-chan error) error {
	f, err := os.Open(path) //nolint:gosec // the demo's own log
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var seen bytes.Buffer
	for {
		n, err := io.Copy(io.MultiWriter(o.out, &seen), f)
		if err != nil {
			return err
		}
		if n > 0 && bytes.Contains(seen.Bytes(), []byte(readyMarker)) {
			// Let the rest of the instructions reach the log, then show them.
			time.Sleep(200 * time.Millisecond)
			_, _ = io.Copy(o.out, f)
			return nil
		}
		select {
		case err := <-exited:
			_, _ = io.Copy(o.out, f)
			return errors.Join(errors.New("the demo stopped before the fleet was ready (see the log above)"), err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
