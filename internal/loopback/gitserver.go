package loopback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi" //nolint:gosec // httpoxy (CVE-2016-5386) was fixed in Go 1.6.3; this serves loopback git for tests
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// gitHTTPBackend is where Debian's git package installs the smart-HTTP backend.
const gitHTTPBackend = "/usr/lib/git-core/git-http-backend"

// GitServer serves bare git repositories over HTTP on loopback, read-only, with git's own smart-HTTP backend.
type GitServer struct {
	// Addr is host:port of the server; URL(name) is a repository's clone URL.
	Addr string
	root string
	log  *os.File
	srv  *http.Server
}

// StartGitServer serves the repositories under dir.
func StartGitServer(dir string) (*GitServer, error) {
	if _, err := os.Stat(gitHTTPBackend); err != nil {
		return nil, fmt.Errorf("git-http-backend not found (Debian package git): %w", err)
	}
	root := filepath.Join(dir, "repos")
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("create git root: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for git server: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "logs", "git-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) //nolint:gosec // our own log
	if err != nil {
		return nil, fmt.Errorf("open git server log: %w", err)
	}
	handler := &cgi.Handler{
		Path:   gitHTTPBackend,
		Env:    []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
		Stderr: logFile,
	}
	g := &GitServer{Addr: l.Addr().String(), root: root, log: logFile, srv: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := g.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "git server: %v\n", err)
		}
	}()
	return g, nil
}

// URL returns the clone URL of a repository.
func (g *GitServer) URL(repo string) string { return "http://" + g.Addr + "/" + repo + ".git" }

// Commit writes files into a repository (creating it on first use) and commits them on its main branch; a file
// with empty content is removed.
func (g *GitServer) Commit(ctx context.Context, repo, message string, files map[string]string) error {
	bare := filepath.Join(g.root, repo+".git")
	work := filepath.Join(g.root, ".work", repo)
	if _, err := os.Stat(bare); os.IsNotExist(err) {
		if err := git(ctx, "", "init", "--bare", "--initial-branch=main", bare); err != nil {
			return err
		}
		if err := git(ctx, "", "clone", bare, work); err != nil {
			return err
		}
	}
	for name, content := range files {
		path := filepath.Join(work, name)
		if content == "" {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("remove %s: %w", name, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return fmt.Errorf("create dir for %s: %w", name, err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil { //nolint:gosec // test repository content
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	for _, args := range [][]string{
		{"add", "-A"},
		{"-c", "user.name=argocd-pull", "-c", "user.email=argocd-pull@example.com", "commit", "-q", "-m", message},
		{"push", "-q", "origin", "HEAD:main"},
	} {
		if err := git(ctx, work, args...); err != nil {
			return err
		}
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Stop stops the server.
func (g *GitServer) Stop() {
	_ = g.srv.Close()
	_ = g.log.Close()
}
