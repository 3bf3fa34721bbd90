package store

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkApplyStatuses measures the store's status path alone: batches of 500 status writes to 5,000
// works, each a newer status of the current version. It reports statuses/s.
func BenchmarkApplyStatuses(b *testing.B) {
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, fmt.Sprintf("bench_statuses_%d", b.N))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(ctx, Config{URL: url, InstanceID: "bench", MaxConns: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.EnsureConsumer(ctx, "c1"); err != nil {
		b.Fatal(err)
	}
	const works, batch = 5000, 500
	writes := make([]SpecWrite, works)
	for i := range writes {
		writes[i] = spec(fmt.Sprintf("r%05d", i), "c1", 0, `{"manifests":[]}`)
	}
	for i := 0; i < works; i += batch {
		if _, err := s.ApplySpecs(ctx, writes[i:i+batch], false); err != nil {
			b.Fatal(err)
		}
	}
	status := []byte(`{"conditions":[{"type":"Applied","status":"True","reason":"Applied","message":"ok"}]}`)
	b.ResetTimer()
	seq := int64(1)
	for n := 0; n < b.N; n++ {
		in := make([]StatusWrite, batch)
		for i := range in {
			seq++
			in[i] = StatusWrite{ID: fmt.Sprintf("r%05d", (n*batch+i)%works), Consumer: "c1", Version: 1, Sequence: seq,
				Hash: fmt.Sprint(seq), Status: status}
		}
		if _, err := s.ApplyStatuses(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "statuses/s")
}
