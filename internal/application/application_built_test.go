package application

import "testing"

// TestBuiltWorks: a work's hash is remembered for the Application's version and BuildWork's other inputs, and
// any of them changed is a new build.
func TestBuiltWorks(t *testing.T) {
	var b builtWorks
	base := []string{"cluster1", "work", "default", "", "", "false"}
	inputs := func(p []string) uint64 { return buildInputs(p[0], p[1], p[2], p[3], p[4], p[5] == "true") }
	b.record("ns/app", "7", inputs(base), "h1")
	if h, ok := b.hash("ns/app", "7", inputs(base)); !ok || h != "h1" {
		t.Fatalf("hash = %q, %v; want h1", h, ok)
	}
	if _, ok := b.hash("ns/app", "8", inputs(base)); ok {
		t.Error("a new version of the Application found the old build")
	}
	if _, ok := b.hash("ns/other", "7", inputs(base)); ok {
		t.Error("another Application found the build")
	}
	changes := [][]string{
		{"cluster2", "work", "default", "", "", "false"},
		{"cluster1", "work-2", "default", "", "", "false"},
		{"cluster1", "work", "team", "", "", "false"},
		{"cluster1", "work", "default", "12", "", "false"},
		{"cluster1", "work", "default", "", "2026-11-30T01:00:00Z", "false"},
		{"cluster1", "work", "default", "", "", "true"},
		// The fields are delimited: moving a character from one to the next is a change.
		{"cluster", "1work", "default", "", "", "false"},
	}
	for _, c := range changes {
		if _, ok := b.hash("ns/app", "7", inputs(c)); ok {
			t.Errorf("inputs %q found the build of %q", c, base)
		}
	}
	b.forget("ns/app")
	if _, ok := b.hash("ns/app", "7", inputs(base)); ok {
		t.Error("a forgotten build was found")
	}
}
