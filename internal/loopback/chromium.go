package loopback

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Browser runs Debian's headless Chromium against loopback pages. Each page has a new, empty profile and no
// network other than the page's own.
type Browser struct {
	// Path is the chromium binary.
	Path string
	// Dir holds the profiles of the pages.
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

// Page is a page of its own headless Chromium, driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe), so that a test reads the live document until it shows what the test waits for.
// (`chromium --dump-dom` dumps the document once, when the page's load event fires; Argo CD's pages ask the
// API for what they show after that, and on a loaded machine the dump came before the answers.)
type Page struct {
	cmd     *exec.Cmd
	profile string
	// commands goes to chromium's fd 3, events come from its fd 4: JSON messages ended by a NUL.
	commands *os.File
	events   *os.File
	reader   *bufio.Reader
	session  string
	lastID   int
	stderr   *limitedBuffer
	done     chan struct{}
}

// pageCommandTimeout bounds one DevTools command where the context has no sooner deadline.
const pageCommandTimeout = time.Minute

// reloadAfter is how long WaitDOM waits on one load of the page before it loads it again, as a user would.
const reloadAfter = time.Minute

// Open starts a headless Chromium with a window of width×height pixels and navigates it to url. Close stops it.
func (b *Browser) Open(ctx context.Context, url string, width, height int) (_ *Page, err error) {
	profile, err := os.MkdirTemp(b.Dir, "chromium-profile-")
	if err != nil {
		return nil, fmt.Errorf("create chromium profile: %w", err)
	}
	p := &Page{profile: profile, stderr: &limitedBuffer{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	commandsIn, commands, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	events, eventsOut, err := os.Pipe()
	if err != nil {
		_ = commandsIn.Close()
		_ = commands.Close()
		return nil, err
	}
	p.commands, p.events, p.reader = commands, events, bufio.NewReaderSize(events, 1<<20)
	p.cmd = exec.Command(b.Path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", //nolint:gosec // chromium on our own loopback pages
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir="+profile, "about:blank")
	p.cmd.Dir = profile
	p.cmd.Env = append(os.Environ(), "HOME="+profile)
	p.cmd.Stderr = p.stderr
	p.cmd.ExtraFiles = []*os.File{commandsIn, eventsOut}
	err = p.cmd.Start()
	_ = commandsIn.Close()
	_ = eventsOut.Close()
	if err != nil {
		p.cmd = nil
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()

	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := p.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := p.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	p.session = attached.SessionID
	if err := p.call(ctx, p.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return nil, err
	}
	var navigated struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &navigated); err != nil {
		return nil, err
	}
	if navigated.ErrorText != "" {
		return nil, fmt.Errorf("chromium cannot load %s: %s", url, navigated.ErrorText)
	}
	return p, nil
}

// DOM returns the page's document as HTML, as its scripts have made it so far.
func (p *Page) DOM(ctx context.Context) (string, error) {
	var evaluated struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	err := p.call(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression": "document.documentElement ? document.documentElement.outerHTML : ''", "returnByValue": true}, &evaluated)
	if err != nil {
		return "", err
	}
	if evaluated.ExceptionDetails != nil {
		return "", fmt.Errorf("read the page's document: %s", evaluated.ExceptionDetails.Text)
	}
	return evaluated.Result.Value, nil
}

// WaitDOM reads the page's document until ready accepts it, and returns it. A page that is not ready a minute
// after it was loaded is loaded again, as a user would. After timeout it gives up with ready's last error.
func (p *Page) WaitDOM(ctx context.Context, timeout time.Duration, ready func(dom string) error) (string, error) {
	deadline := time.Now().Add(timeout)
	loaded := time.Now()
	for {
		dom, err := p.DOM(ctx)
		if err == nil {
			if err = ready(dom); err == nil {
				return dom, nil
			}
		}
		if time.Now().After(deadline) {
			return dom, fmt.Errorf("%w (after %s)", err, timeout)
		}
		if time.Since(loaded) > reloadAfter {
			if err := p.call(ctx, p.session, "Page.reload", map[string]any{}, nil); err != nil {
				return dom, err
			}
			loaded = time.Now()
		}
		select {
		case <-ctx.Done():
			return dom, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// DOMContains is a WaitDOM check that accepts a document containing every one of want.
func DOMContains(want ...string) func(dom string) error {
	return func(dom string) error {
		for _, w := range want {
			if !strings.Contains(dom, w) {
				return fmt.Errorf("the page lacks %q", w)
			}
		}
		return nil
	}
}

// Screenshot writes a PNG of the page's window to png.
func (p *Page) Screenshot(ctx context.Context, png string) error {
	var shot struct {
		Data string `json:"data"`
	}
	if err := p.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		return err
	}
	data, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil || len(data) == 0 {
		return fmt.Errorf("chromium's screenshot is no PNG (%d bytes): %v", len(data), err)
	}
	return os.WriteFile(png, data, 0o600)
}

// Close stops the page's Chromium and removes its profile. A second Close does nothing.
func (p *Page) Close() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.cmd = nil
	}
	for _, f := range []**os.File{&p.commands, &p.events} {
		if *f != nil {
			_ = (*f).Close()
			*f = nil
		}
	}
	_ = os.RemoveAll(p.profile)
}

// call sends one DevTools command (to the browser, or to the page's session) and decodes its result into
// result, skipping the events chromium sends in between.
func (p *Page) call(ctx context.Context, session, method string, params any, result any) error {
	p.lastID++
	id := p.lastID
	msg, err := json.Marshal(struct {
		ID        int    `json:"id"`
		SessionID string `json:"sessionId,omitempty"`
		Method    string `json:"method"`
		Params    any    `json:"params"`
	}{id, session, method, params})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(pageCommandTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := p.commands.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if _, err := p.commands.Write(append(msg, 0)); err != nil {
		return p.failed(method, err)
	}
	if err := p.events.SetReadDeadline(deadline); err != nil {
		return err
	}
	for {
		raw, err := p.reader.ReadBytes(0)
		if err != nil {
			return p.failed(method, err)
		}
		var answer struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw[:len(raw)-1], &answer); err != nil {
			return fmt.Errorf("chromium %s: decode %.200q: %w", method, raw, err)
		}
		if answer.ID != id {
			continue // an event, or the answer to a command given up on
		}
		if answer.Error != nil {
			return fmt.Errorf("chromium %s: %s", method, answer.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(answer.Result, result)
	}
}

func (p *Page) failed(method string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("chromium %s: no answer: %w", method, err)
	}
	return fmt.Errorf("chromium %s: %w: %s", method, err, strings.TrimSpace(p.stderr.String()))
}

// limitedBuffer keeps the last 8 KiB written to it (chromium is chatty on stderr).
type limitedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = l.b[len(l.b)-8<<10:]
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
