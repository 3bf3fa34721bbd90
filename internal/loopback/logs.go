package loopback

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logToFile sends the logs of the controllers a test runs in-process (controller-runtime and klog) to a file in
// the environment's directory, which is kept when a test fails.
func logToFile(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "logs", "in-process.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) //nolint:gosec // our own log
	if err != nil {
		return fmt.Errorf("open in-process log: %w", err)
	}
	logger := zap.New(zap.WriteTo(f), zap.UseDevMode(true), zap.Level(zapcore.Level(-2)))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return nil
}

// LogToFile sends the logs of what a command runs in its own process (client libraries, an in-process
// simulator) to a file, so that the command's own output stays readable. The returned function flushes and
// closes it.
func LogToFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // the command's own log
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("logtostderr", "false"); err != nil {
		return nil, err
	}
	if err := fs.Set("alsologtostderr", "false"); err != nil {
		return nil, err
	}
	klog.SetOutput(f)
	ctrl.SetLogger(klog.NewKlogr())
	return func() { klog.Flush(); _ = f.Close() }, nil
}

// Machine describes this machine for a report: CPUs, memory, operating system, Go.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
		}
	}
	return fmt.Sprintf("%d × %s%s, %s/%s, %s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}
