package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// cpuCgroupRoot is the cgroup v1 CPU controller's hierarchy, where -cgroups puts each measured process in a
// cgroup of its own.
const cpuCgroupRoot = "/sys/fs/cgroup/cpu"

// defaultCPURequests are the CPU requests -cgroups gives the processes no -cpu-request names, in millicores: a
// kubeadm control plane's static pods (kube-apiserver 250m, etcd 100m, kube-controller-manager 200m) and the
// hub chart's defaults (charts/argocd-pull/values.yaml: 100m for the controller, the server and PostgreSQL).
// The simulator and the benchmark stand in for what is neither argocd-pull nor the control plane (the managed
// clusters; the clients that create the Applications and the tracker that watches them): a core each, so that the
// clusters' answers and the creates do not queue behind the measured processes.
var defaultCPURequests = map[string]int64{
	"kube-apiserver": 250, "etcd": 100, "kube-controller-manager": 200,
	"controller": 100, "server": 100, "postgres": 100,
	simulatorProcess: 1000, benchmarkProcess: 1000,
}

// cpuRequests are the -cpu-request flags: millicores by process name.
type cpuRequests map[string]int64

func (c cpuRequests) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+milliText(c[n]))
	}
	return strings.Join(parts, ",")
}

func (c cpuRequests) Set(v string) error {
	name, q, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want NAME=QUANTITY (controller=1, say), got %q", v)
	}
	if _, known := defaultCPURequests[name]; !known {
		return fmt.Errorf("no process %q; the processes are %s", name, cpuRequests(defaultCPURequests))
	}
	quantity, err := resource.ParseQuantity(q)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	c[name] = quantity.MilliValue()
	return nil
}

// withDefaults is the requests of every measured process: these, and defaultCPURequests for the others.
func (c cpuRequests) withDefaults() cpuRequests {
	out := cpuRequests{}
	for n, m := range defaultCPURequests {
		out[n] = m
	}
	for n, m := range c {
		out[n] = m
	}
	return out
}

func milliText(m int64) string {
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

// milliCPUToShares is the kubelet's: a container's CPU request in millicores as cgroup v1 cpu.shares (1,024 a
// core, at least 2), so that processes that all want the CPU share it as their pods would on a node.
func milliCPUToShares(milli int64) int64 {
	shares := milli * 1024 / 1000
	if shares < 2 {
		return 2
	}
	return shares
}

// cgroups holds one CPU cgroup per measured process under a cgroup of the run's own, with the shares its
// request gives it, as a kubelet runs each container: without them every thread on the machine competes
// alike, and a process with one busy goroutine (a controller decoding its list) gets a sliver of a core
// beside an apiserver with dozens.
type cgroups struct {
	dir      string
	requests cpuRequests
}

// newCgroups makes the run's cgroup and one child per process with its shares.
func newCgroups(requests cpuRequests) (*cgroups, error) {
	if _, err := os.Stat(filepath.Join(cpuCgroupRoot, "cpu.shares")); err != nil {
		return nil, fmt.Errorf("-cgroups needs the cgroup v1 CPU controller at %s: %w", cpuCgroupRoot, err)
	}
	c := &cgroups{dir: filepath.Join(cpuCgroupRoot, fmt.Sprintf("argocd-pull-bench-%d", os.Getpid())), requests: requests.withDefaults()}
	for name, milli := range c.requests {
		dir := c.path(name)
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a cgroup directory
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.FormatInt(milliCPUToShares(milli), 10)), 0o600); err != nil {
			return nil, fmt.Errorf("cpu.shares of %s: %w", name, err)
		}
	}
	return c, nil
}

func (c *cgroups) path(name string) string {
	return filepath.Join(c.dir, strings.Fields(name)[0])
}

// place moves each process (with its threads and, for PostgreSQL, its backends) into its cgroup now and every
// second until stop is called: a restarted controller or a new backend is in its own within a second.
func (c *cgroups) place(pids map[string]func() []int) (stop func()) {
	if c == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	placeAll := func() {
		for name, f := range pids {
			for _, pid := range f() {
				c.move(name, pid)
			}
		}
	}
	placeAll()
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				placeAll()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// move puts a process in its cgroup; one that has exited meanwhile is no error.
func (c *cgroups) move(name string, pid int) {
	if pid <= 0 {
		return
	}
	_ = os.WriteFile(filepath.Join(c.path(name), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o600)
}

// close moves what is left (the benchmark itself) back to the root cgroup and removes the run's cgroups.
func (c *cgroups) close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for name := range c.requests {
		dir := c.path(name)
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil { //nolint:gosec // a cgroup file
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(cpuCgroupRoot, "cgroup.procs"), []byte(pid), 0o600)
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(c.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pidsOf is a process's ID as place wants it.
func pidsOf(pid func() int) func() []int {
	return func() []int { return []int{pid()} }
}

// treePids is a process and its descendants (PostgreSQL's backends).
func treePids(root func() int) func() []int {
	return func() []int {
		r := root()
		if r <= 0 {
			return nil
		}
		return append([]int{r}, descendants(r)...)
	}
}
