package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// logToFile sends the logs of what runs in this process (the simulator, client libraries) to a file, so that
// the benchmark's own output stays readable.
func logToFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // the benchmark's log
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
