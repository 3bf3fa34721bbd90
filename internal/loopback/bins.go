package loopback

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BinDirEnv names the environment variable that points at the directory holding kube-apiserver, etcd and
// the other binaries `make setup` builds. Without it, the bin/ directory at the module root is used.
const BinDirEnv = "ARGOCD_PULL_BIN_DIR"

// BinDir returns the directory of the binaries built by `make setup`.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// ModuleRoot returns the directory of this repository's go.mod, searching upwards from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // reading go.mod
		if err == nil && containsModuleLine(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("module root of github.com/argocd-pull/argocd-pull not found above the working directory")
		}
		dir = parent
	}
}

func containsModuleLine(goMod []byte) bool {
	const want = "module github.com/argocd-pull/argocd-pull\n"
	return len(goMod) >= len(want) && string(goMod[:len(want)]) == want
}

// Binary returns the path of a binary built by `make setup`, or an error that says how to build it.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found in %s: run `make setup` first", name, dir)
	}
	return path, nil
}

// SystemBinary finds a binary installed by the system (PostgreSQL, redis, git) in PATH or in extra directories.
func SystemBinary(name string, extraDirs ...string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range extraDirs {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %v: run `make setup` first", name, extraDirs)
}
