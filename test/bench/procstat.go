package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
func processUsage(pid int) (usage, error) {
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
	for _, ticks := range f[11:15] { // utime, stime, cutime, cstime
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

// treeUsage sums a process and its descendants (PostgreSQL's backends). Resident sets overlap in shared
// memory, so the sum overstates memory; CPU seconds add up exactly.
func treeUsage(root int) (usage, error) {
	total, err := processUsage(root)
	if err != nil {
		return total, err
	}
	for _, child := range descendants(root) {
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

// pssTree reads a process and its descendants with their memory as proportional set sizes (PostgreSQL's
// shared buffers counted once, in shares) rather than resident sets, and keeps the highest sum it has read as
// the peak: the kernel keeps no peak of it, so the peak is as good as the reads are frequent.
func pssTree(root int) func() (usage, error) {
	var mu sync.Mutex
	var peak int64
	return func() (usage, error) {
		u, err := treeUsage(root)
		if err != nil {
			return u, err
		}
		var pss int64
		for _, pid := range append([]int{root}, descendants(root)...) {
			pss += processPSS(pid)
		}
		mu.Lock()
		defer mu.Unlock()
		peak = max(peak, pss)
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
