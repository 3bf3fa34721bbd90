package testutil

import "runtime"

// HeapPerItem returns the heap that fill leaves in use, per item of the n it keeps: the bytes a cache keeps per
// object. What fill keeps must stay reachable after it returns.
func HeapPerItem(n int, fill func()) float64 {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	fill()
	return (float64(heap()) - float64(before)) / float64(n)
}
