package migratecmd

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/term"
)

// progress shows how far the move is: on a terminal, one line with a bar of the clusters done and what each
// moving cluster waits for, redrawn in place; elsewhere (a log, a pipe), a line whenever a cluster's step
// changes.
type progress struct {
	out      io.Writer
	terminal bool
	// width is the terminal's width (0: unknown).
	width func() int

	mu       sync.Mutex
	total    int
	finished int
	steps    map[string]string
	drawn    bool
}

func newProgress(out io.Writer) *progress {
	p := &progress{out: out, width: func() int { return 0 }, steps: map[string]string{}}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.terminal = true
		p.width = func() int {
			w, _, err := term.GetSize(int(f.Fd()))
			if err != nil {
				return 0
			}
			return w
		}
	}
	return p
}

// start begins the count of the clusters: total in all, already done before the command started.
func (p *progress) start(total, already int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total, p.finished = total, already
	p.drawLocked()
}

// moving marks a cluster as moving (delta 1) or not (delta -1).
func (p *progress) moving(cluster string, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if delta > 0 {
		p.steps[cluster] = "starting"
	} else {
		delete(p.steps, cluster)
	}
	p.drawLocked()
}

// done counts a cluster as moved.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished++
	p.drawLocked()
}

// step says what a moving cluster does now.
func (p *progress) step(cluster, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.steps[cluster] == text {
		return
	}
	p.steps[cluster] = text
	if p.terminal {
		p.drawLocked()
		return
	}
	_, _ = fmt.Fprintf(p.out, "[%d/%d] cluster %s: %s\n", p.finished, p.total, cluster, text)
}

// clear removes the bar before a line is printed; redraw puts it back.
func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal && p.drawn {
		_, _ = fmt.Fprint(p.out, "\r\033[K")
	}
}

func (p *progress) redraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		p.drawLocked()
	}
}

// finish leaves the bar's last state on its line.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal && p.drawn {
		_, _ = fmt.Fprintln(p.out)
	}
	p.drawn = false
	p.total = 0
}

func (p *progress) drawLocked() {
	if !p.terminal || p.total == 0 {
		return
	}
	const width = 30
	filled := width * p.finished / p.total
	clusters := make([]string, 0, len(p.steps))
	for c := range p.steps {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	var moving []string
	for _, c := range clusters {
		moving = append(moving, c+": "+p.steps[c])
	}
	line := fmt.Sprintf("[%s%s] %d/%d clusters  %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.finished, p.total, strings.Join(moving, "; "))
	if w := p.width(); w > 1 && len(line) >= w {
		line = line[:w-1]
	}
	_, _ = fmt.Fprint(p.out, "\r\033[K"+line)
	p.drawn = true
}
