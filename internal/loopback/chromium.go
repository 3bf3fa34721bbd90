package loopback

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Browser runs Debian's headless Chromium against loopback pages: a screenshot, or the DOM after the page's
// scripts ran. Each run has a new, empty profile and no network other than the page's own.
type Browser struct {
	// Path is the chromium binary.
	Path string
	// Dir holds the profiles of the runs.
	Dir string
}

// NewBrowser finds chromium (installed by `make setup`).
func NewBrowser(dir string) (*Browser, error) {
	path, err := SystemBinary("chromium", "/usr/bin")
	if err != nil {
		return nil, err
	}
	return &Browser{Path: path, Dir: dir}, nil
}

// Screenshot loads url, lets its scripts run for budget (wall-clock time), and
// writes a PNG of width×height pixels to png.
func (b *Browser) Screenshot(ctx context.Context, url, png string, width, height int, budget time.Duration) error {
	abs, err := filepath.Abs(png)
	if err != nil {
		return err
	}
	_, err = b.run(ctx, budget, "--screenshot="+abs, "--window-size="+strconv.Itoa(width)+","+strconv.Itoa(height),
		"--hide-scrollbars", url)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || st.Size() == 0 {
		return fmt.Errorf("chromium wrote no screenshot of %s to %s", url, abs)
	}
	return nil
}

// DOM loads url, lets its scripts run for budget (wall-clock time) and returns the
// resulting document's HTML.
func (b *Browser) DOM(ctx context.Context, url string, budget time.Duration) (string, error) {
	return b.run(ctx, budget, "--dump-dom", url)
}

func (b *Browser) run(ctx context.Context, budget time.Duration, args ...string) (string, error) {
	profile, err := os.MkdirTemp(b.Dir, "chromium-profile-")
	if err != nil {
		return "", fmt.Errorf("create chromium profile: %w", err)
	}
	defer func() { _ = os.RemoveAll(profile) }()
	ctx, cancel := context.WithTimeout(ctx, budget+time.Minute)
	defer cancel()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + profile,
		// Wall-clock time: virtual time (--virtual-time-budget) stands still while a request is open, and Argo CD's
		// pages keep an event stream open.
		"--timeout=" + strconv.FormatInt(budget.Milliseconds(), 10)}
	cmd := exec.CommandContext(ctx, b.Path, append(flags, args...)...) //nolint:gosec // chromium on our own loopback pages
	cmd.Dir = profile
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("chromium %v: %w: %s", args, err, stderr.String())
	}
	return string(out), nil
}

// limitedBuffer keeps the last 8 KiB written to it (chromium is chatty on stderr).
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = l.b[len(l.b)-8<<10:]
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
