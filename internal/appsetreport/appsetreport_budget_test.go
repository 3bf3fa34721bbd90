package appsetreport

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestWriteBudget(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	now := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }

	none := newWriteBudget(0, time.Second)
	for i := range 100 {
		if wait := none.take(a, 1<<20, at(time.Duration(i)*time.Millisecond)); wait != 0 {
			t.Fatalf("without a budget, write %d waits %v", i, wait)
		}
	}

	// 1,000 bytes per second, an interval's worth (1,000 bytes) at once.
	budget := newWriteBudget(1000, time.Second)
	if wait := budget.take(a, 1000, now); wait != 0 {
		t.Fatalf("the first write waits %v, want none (the burst)", wait)
	}
	wait := budget.take(b, 500, now)
	if wait < 450*time.Millisecond || wait > 550*time.Millisecond {
		t.Fatalf("a 500-byte write right after waits %v, want about 500ms", wait)
	}
	// Until its reservation is due the report is not evaluated at all; then it is.
	if p := budget.pending(b, at(100*time.Millisecond)); p < 350*time.Millisecond || p > 450*time.Millisecond {
		t.Fatalf("b pending after 100ms: %v, want about 400ms", p)
	}
	if p := budget.pending(b, at(wait)); p != 0 {
		t.Fatalf("b pending when due: %v, want 0", p)
	}
	if p := budget.pending(a, now); p != 0 {
		t.Fatalf("a, written at once, pending %v, want 0", p)
	}
	// Evaluated again before its reservation is due, the report still waits, and takes no more budget.
	if again := budget.take(b, 500, at(100*time.Millisecond)); again < 350*time.Millisecond || again > 450*time.Millisecond {
		t.Fatalf("b evaluated again after 100ms waits %v, want about 400ms", again)
	}
	// Due: b writes whatever its size has become, its bytes were set aside.
	if again := budget.take(b, 900, at(wait)); again != 0 {
		t.Fatalf("b at its reservation waits %v, want none", again)
	}
	// A report larger than an interval's worth counts as an interval's worth.
	if wait := budget.take(a, 10_000, at(wait)); wait < 900*time.Millisecond || wait > 1100*time.Millisecond {
		t.Fatalf("a 10,000-byte write waits %v, want about 1s", wait)
	}
	// A report that needs no write any more gives its reservation up.
	budget.forget(a)
	if _, ok := budget.reserved[a]; ok {
		t.Fatal("forget kept the reservation")
	}
}
