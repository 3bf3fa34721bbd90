package memlimit

import (
	"errors"
	"runtime/debug"
	"testing"
)

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"cgroup v2", map[string]string{"/sys/fs/cgroup/memory.max": "1073741824\n"}, 1 << 30},
		{"cgroup v2 without a limit", map[string]string{"/sys/fs/cgroup/memory.max": "max\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, 0},
		{"cgroup v1", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"cgroup v1 without a limit", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"unreadable", map[string]string{"/sys/fs/cgroup/memory.max": "lots"}, 0},
		{"no cgroup files", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := func(name string) ([]byte, error) {
				if v, ok := c.files[name]; ok {
					return []byte(v), nil
				}
				return nil, errors.New("no such file")
			}
			if got := Limit(read); got != c.want {
				t.Fatalf("Limit = %d, want %d", got, c.want)
			}
		})
	}
}

// TestApplyLeavesGOMEMLIMIT: a limit set by GOMEMLIMIT is the runtime's, and Apply leaves it alone.
func TestApplyLeavesGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB")
	before := debug.SetMemoryLimit(-1)
	if got := Apply(); got != 0 || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("Apply = %d; the limit went from %d to %d", got, before, debug.SetMemoryLimit(-1))
	}
}
