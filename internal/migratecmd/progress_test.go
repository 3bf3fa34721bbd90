package migratecmd

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressLines: in a log, a line when a cluster's step changes, with the count of clusters done.
func TestProgressLines(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	p.start(3, 1)
	p.moving("c2", 1)
	p.step("c2", "%d/%d works copied", 0, 2)
	p.step("c2", "%d/%d works copied", 0, 2)
	p.step("c2", "%d/%d works copied", 2, 2)
	p.done()
	p.moving("c2", -1)
	p.step("c3", "copying")
	p.finish()
	want := "[1/3] cluster c2: 0/2 works copied\n[1/3] cluster c2: 2/2 works copied\n[2/3] cluster c3: copying\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestProgressBar: on a terminal, one line redrawn in place with a bar of the clusters done and each moving
// cluster's step, cut to the terminal's width.
func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := &progress{out: &out, terminal: true, width: func() int { return 80 }, steps: map[string]string{}}
	p.start(4, 1)
	p.moving("c2", 1)
	p.step("c2", "3/10 works copied")
	p.moving("c3", 1)
	p.step("c3", "orphaning its works on kube: a long text that goes on and on beyond the terminal's width")
	frames := strings.Split(out.String(), "\r\033[K")
	last := frames[len(frames)-1]
	if !strings.HasPrefix(last, "[#######.......................] 1/4 clusters  c2: 3/10 works copied; c3: orpha") {
		t.Errorf("last frame %q", last)
	}
	if len(last) != 79 || strings.Contains(out.String(), "\n") {
		t.Errorf("frame of %d characters, output %q", len(last), out.String())
	}
	p.finish()
	if !strings.HasSuffix(out.String(), "\n") {
		t.Error("the bar's line is not ended")
	}
}
