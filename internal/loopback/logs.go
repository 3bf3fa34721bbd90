package loopback

import (
	"fmt"
	"os"
	"path/filepath"

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
