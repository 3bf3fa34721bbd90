package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
const clockTicks = 100

// usage is a process's (or a process group's) CPU seconds and memory.
type usage struct {
	CPUSeconds float64
	RSSBytes   int64
	// PeakRSSBytes is the kernel's high-water mark of the resident set (VmHWM).
	PeakRSSBytes int64
}

// processUsage reads /proc for one process. Its CPU seconds include those of its children that have exited
// and been waited for (PostgreSQL's backends that closed): without them a process tree's CPU went down when a
// backend exited.
func processUsage(pid int) (usage, error) { return readUsage(pid, true) }

// ownUsage reads /proc for the benchmark's own process, without its children: they are the fleet's processes,
// measured each by itself, and a controller the benchmark killed and waited for would add all its CPU to the
// benchmark's.
func ownUsage() (usage, error) { return readUsage(os.Getpid(), false) }

func readUsage(pid int, withChildren bool) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 15 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	fields := f[11:15] // utime, stime, cutime, cstime
	if !withChildren {
		fields = f[11:13]
	}
	for _, ticks := range fields {
		t, _ := strconv.ParseFloat(ticks, 64)
		u.CPUSeconds += t / clockTicks
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.RSSBytes = kb * 1024
		case "VmHWM":
			u.PeakRSSBytes = kb * 1024
		}
	}
	return u, nil
}

// treeUsage sums a process and its descendants (PostgreSQL's backends, as descendants lists them). Resident
// sets overlap in shared memory, so the sum overstates memory; CPU seconds add up exactly.
func treeUsage(root int, children []int) (usage, error) {
	total, err := processUsage(root)
	if err != nil {
		return total, err
	}
	for _, child := range children {
		u, err := processUsage(child)
		if err != nil {
			continue // exited meanwhile
		}
		total.CPUSeconds += u.CPUSeconds
		total.RSSBytes += u.RSSBytes
		total.PeakRSSBytes += u.PeakRSSBytes
	}
	return total, nil
}

// postgresPSSInterval is how often the timeline reads PostgreSQL's proportional set size. The kernel walks
// every page a process maps to count it, shared buffers in each backend: read every two seconds at 150,000
// Applications that was two fifths of the benchmark's CPU, taken from the hub it measures. PostgreSQL's memory
// moves slowly; its CPU seconds are still read at every call.
const postgresPSSInterval = 30 * time.Second

// pssTree reads a process and its descendants with their memory as proportional set sizes (PostgreSQL's
// shared buffers counted once, in shares) rather than resident sets, and keeps the highest sum it has read as
// the peak: the kernel keeps no peak of it, so the peak is as good as the reads are frequent. The sizes are
// read at most once per interval (0: at every call); in between a call returns the last ones with the CPU
// seconds of now.
func pssTree(root int, interval time.Duration) func() (usage, error) {
	var mu sync.Mutex
	var pss, peak int64
	var readAt time.Time
	return func() (usage, error) {
		children := descendants(root)
		u, err := treeUsage(root, children)
		if err != nil {
			return u, err
		}
		mu.Lock()
		defer mu.Unlock()
		if readAt.IsZero() || time.Since(readAt) >= interval {
			pss = 0
			for _, pid := range append([]int{root}, children...) {
				pss += processPSS(pid)
			}
			readAt = time.Now()
			peak = max(peak, pss)
		}
		u.RSSBytes, u.PeakRSSBytes = pss, peak
		return u, nil
	}
}

// processPSS is a process's proportional set size (0 when it cannot be read).
func processPSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func descendants(root int) []int {
	parents := map[int][]int{}
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range entries {
		b, err := os.ReadFile(e) //nolint:gosec // /proc
		if err != nil {
			continue
		}
		s := string(b)
		pid, _ := strconv.Atoi(strings.Fields(s)[0])
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parents[ppid] = append(parents[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range parents[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
