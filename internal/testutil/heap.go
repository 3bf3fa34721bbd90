package testutil

import "runtime"

// HeapInUse collects garbage and returns the bytes of heap in use: what the process keeps.
func HeapInUse() uint64 {
	for range 2 { // a second cycle frees what the first one's finalizers released
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// HeapPerItem returns the heap that fill leaves in use, per item of the n it keeps: the bytes a cache keeps per
// object. What fill keeps must stay reachable after it returns.
func HeapPerItem(n int, fill func()) float64 {
	before := HeapInUse()
	fill()
	return (float64(HeapInUse()) - float64(before)) / float64(n)
}
