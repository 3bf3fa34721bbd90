package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMilliCPUToShares: the kubelet's conversion of a CPU request to cgroup v1 cpu.shares.
func TestMilliCPUToShares(t *testing.T) {
	for milli, want := range map[int64]int64{0: 2, 1: 2, 100: 102, 250: 256, 1000: 1024, 2500: 2560} {
		if got := milliCPUToShares(milli); got != want {
			t.Errorf("%dm: %d shares, want %d", milli, got, want)
		}
	}
}

// TestCPURequestsFlag: -cpu-request takes a quantity for a process the benchmark measures and refuses others.
func TestCPURequestsFlag(t *testing.T) {
	c := cpuRequests{}
	if err := c.Set("controller=1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("server=250m"); err != nil {
		t.Fatal(err)
	}
	if got := c.withDefaults(); got["controller"] != 1000 || got["server"] != 250 || got["kube-apiserver"] != 250 {
		t.Errorf("with defaults: %v", got)
	}
	for _, bad := range []string{"controller", "kubelet=1", "controller=lots"} {
		if err := c.Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCgroupsPlace: place puts a process in the cgroup of its name with the shares of its request, and close
// removes the cgroups once the process has gone.
func TestCgroupsPlace(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cpuCgroupRoot, "cpu.shares")); err != nil {
		t.Skipf("no cgroup v1 CPU controller here: %v", err)
	}
	cg, err := newCgroups(cpuRequests{"controller": 1500})
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	stop := cg.place(map[string]func() []int{"controller": pidsOf(func() int { return child.Process.Pid })})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", child.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := ":cpu:/" + strings.TrimPrefix(cg.path("controller"), cpuCgroupRoot+"/") + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("the child's cgroups:\n%s\nwant %q", b, want)
	}
	shares, err := os.ReadFile(filepath.Join(cg.path("controller"), "cpu.shares"))
	if err != nil || strings.TrimSpace(string(shares)) != "1536" {
		t.Errorf("the controller's cpu.shares: %q, %v; want 1536", shares, err)
	}
	stop()
	_ = child.Process.Kill()
	_ = child.Wait()
	if err := cg.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", cg.dir, err)
	}
}
