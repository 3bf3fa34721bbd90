package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// profiler collects the Go profiles of the fleet's processes (-pprof): CPU profiles of a phase, taken in
// consecutive windows and merged into one profile per process, and heap profiles at a moment. Each profile is
// written as pprof's .pb.gz with a text summary of its top functions beside it.
type profiler struct {
	dir     string
	targets map[string]profileTarget
	// window is the length of one CPU profile request: short enough that a phase's profile ends soon after the
	// phase, long enough that the requests cost nothing.
	window time.Duration
	log    func(string, ...any)
	// postgres is the URL of the server's database when PostgreSQL runs with pg_stat_statements (Maestro mode):
	// each CPU phase also writes the statements' times (postgresStatements).
	postgres string
}

// profileTarget is a process serving net/http/pprof.
type profileTarget struct {
	client *http.Client
	// base is the URL of its /debug/pprof/ directory.
	base string
}

func newProfiler(dir string, log func(string, ...any)) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return &profiler{dir: dir, targets: map[string]profileTarget{}, window: 20 * time.Second, log: log}, nil
}

func (p *profiler) add(name string, client *http.Client, base string) {
	if p == nil {
		return
	}
	p.targets[name] = profileTarget{client: client, base: base}
}

// cpu profiles every target from now until the returned function is called, which waits for the last window,
// merges each target's windows into <phase>-<name>-cpu.pb.gz and writes its summary.
func (p *profiler) cpu(ctx context.Context, phase string) (stop func()) {
	if p == nil {
		return func() {}
	}
	p.resetStatements(ctx)
	ctx, cancel := context.WithCancel(ctx)
	stopping := make(chan struct{})
	var wg sync.WaitGroup
	parts := map[string]*[]string{}
	for name, t := range p.targets {
		files := &[]string{}
		parts[name] = files
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopping:
					return
				default:
				}
				path := filepath.Join(p.dir, fmt.Sprintf("%s-%s-cpu-part%03d.pb.gz", phase, name, i))
				url := fmt.Sprintf("%sprofile?seconds=%d", t.base, int(p.window.Seconds()))
				if err := fetch(ctx, t.client, url, path); err != nil {
					if ctx.Err() != nil {
						return
					}
					p.log("pprof: %s cpu: %v", name, err)
					select {
					case <-stopping:
						return
					case <-time.After(time.Second):
					}
					continue
				}
				*files = append(*files, path)
			}
		}()
	}
	return func() {
		p.writeStatements(context.WithoutCancel(ctx), phase)
		close(stopping)
		// The windows under way end within one window; a process that does not answer is given up on.
		timer := time.AfterFunc(p.window+30*time.Second, cancel)
		wg.Wait()
		timer.Stop()
		cancel()
		for name, files := range parts {
			if len(*files) == 0 {
				continue
			}
			out := filepath.Join(p.dir, fmt.Sprintf("%s-%s-cpu.pb.gz", phase, name))
			if err := mergeProfiles(*files, out); err != nil {
				p.log("pprof: merge %s cpu: %v", name, err)
				continue
			}
			for _, f := range *files {
				_ = os.Remove(f)
			}
			p.summarize(out, "")
		}
	}
}

// heap writes each target's heap profile (in use after a collection) as <phase>-<name>-heap.pb.gz.
func (p *profiler) heap(ctx context.Context, phase string) {
	if p == nil {
		return
	}
	names := make([]string, 0, len(p.targets))
	for name := range p.targets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := p.targets[name]
		out := filepath.Join(p.dir, fmt.Sprintf("%s-%s-heap.pb.gz", phase, name))
		if err := fetch(ctx, t.client, t.base+"heap?gc=1", out); err != nil {
			p.log("pprof: %s heap: %v", name, err)
			continue
		}
		p.summarize(out, "inuse_space")
	}
}

// heapAtPeak takes the heap profile of one target (in use after a collection) each time its RSS, read every
// interval, has grown by a tenth over the RSS at the last one, until the returned function is called. The last is
// kept, as <phase>-<name>-peak-heap.pb.gz with its summary: what the process held nearest its peak RSS,
// which a profile taken once a phase is over misses (a restarted controller's peak comes while it catches up).
func (p *profiler) heapAtPeak(ctx context.Context, phase, name string, read func() (usage, error), interval time.Duration) (stop func()) {
	if p == nil {
		return func() {}
	}
	t, ok := p.targets[name]
	if !ok {
		return func() {}
	}
	out := filepath.Join(p.dir, fmt.Sprintf("%s-%s-peak-heap.pb.gz", phase, name))
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			u, err := read()
			now := u.RSSBytes
			if err != nil || (last > 0 && now < last+last/10) {
				continue
			}
			if err := fetch(ctx, t.client, t.base+"heap?gc=1", out+".part"); err != nil {
				if ctx.Err() == nil {
					p.log("pprof: %s heap: %v", name, err)
				}
				continue
			}
			if err := os.Rename(out+".part", out); err != nil {
				p.log("pprof: %v", err)
				continue
			}
			last = now
			p.log("pprof: %s heap taken at %d MiB RSS", name, now>>20)
		}
	}()
	return func() {
		cancel()
		<-done
		_ = os.Remove(out + ".part")
		if _, err := os.Stat(out); err == nil {
			p.summarize(out, "inuse_space")
		}
	}
}

// summarize writes the top functions of a profile, by flat and by cumulative value, to its .txt.
func (p *profiler) summarize(profile, sampleIndex string) {
	base := profile[:len(profile)-len(".pb.gz")]
	var out []byte
	for _, sort := range []string{"-flat", "-cum"} {
		args := []string{"tool", "pprof", "-top", sort, "-nodecount=40"}
		if sampleIndex != "" {
			args = append(args, "-sample_index="+sampleIndex)
		}
		b, err := exec.Command("go", append(args, profile)...).CombinedOutput() //nolint:gosec // our own profile files
		if err != nil {
			p.log("pprof: summarize %s: %v: %s", profile, err, b)
			return
		}
		out = append(out, b...)
		out = append(out, '\n')
	}
	if err := os.WriteFile(base+".txt", out, 0o600); err != nil {
		p.log("pprof: %v", err)
	}
}

// mergeProfiles merges CPU profiles into one with go tool pprof.
func mergeProfiles(files []string, out string) error {
	if len(files) == 1 {
		return os.Rename(files[0], out)
	}
	b, err := exec.Command("go", append([]string{"tool", "pprof", "-proto"}, files...)...).Output() //nolint:gosec // our own profile files
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		return err
	}
	return os.WriteFile(out, b, 0o600)
}

func fetch(ctx context.Context, c *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path) //nolint:gosec // the benchmark's output directory
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
