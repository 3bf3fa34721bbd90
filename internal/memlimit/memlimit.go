// Package memlimit gives the Go runtime of an argocd-pull process a soft memory limit from its container's: 90 %
// of the cgroup's memory limit, unless GOMEMLIMIT sets one. Near that limit the garbage collector runs more
// often instead of letting the heap grow to twice what is live: in a container with a 1 GiB limit, a controller
// whose live heap is 600 MiB then stays under the limit rather than being killed at its first burst of garbage.
// It reads only the cgroup files of the process; it does not touch anything else.
package memlimit

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Fraction is the share of the container's limit the Go heap may use: the rest is for goroutine stacks, the
// runtime and the memory the process maps outside the heap.
const Fraction = 0.9

// unlimited is the least value the kernel reports for "no limit" (cgroup v1 reports about 2^63 rounded to pages).
const unlimited = 1 << 60

// cgroupFiles are where the process's memory limit is: cgroup v2, then v1 (a container sees its own cgroup at
// the root of the hierarchy).
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Apply sets the soft memory limit from the cgroup's when GOMEMLIMIT is not set, and returns it (0: none set).
func Apply() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	soft := Soft(Limit(os.ReadFile))
	if soft <= 0 {
		return 0
	}
	debug.SetMemoryLimit(soft)
	return soft
}

// Soft is the soft memory limit a container's memory limit (bytes) gives the Go runtime; 0 for none.
func Soft(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	return int64(float64(limit) * Fraction)
}

// Limit returns the container's memory limit in bytes, 0 when it has none or it cannot be read.
func Limit(readFile func(string) ([]byte, error)) int64 {
	for _, f := range cgroupFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0
		}
		return n
	}
	return 0
}
