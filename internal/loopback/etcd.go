package loopback

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Etcd is a private etcd member on loopback. Several kube-apiservers share it, each under its own prefix.
type Etcd struct {
	URL  string
	proc *Process
}

func startEtcd(ctx context.Context, dir string) (*Etcd, error) {
	bin, err := Binary("etcd")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		ports, err := FreePorts(2)
		if err != nil {
			return nil, err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		proc, err := StartProcess(ProcessSpec{
			Name: "etcd",
			Path: bin,
			Args: []string{
				"--name=default",
				"--data-dir=" + filepath.Join(dir, "etcd"),
				"--listen-client-urls=" + client,
				"--advertise-client-urls=" + client,
				"--listen-peer-urls=" + peer,
				"--initial-advertise-peer-urls=" + peer,
				"--initial-cluster=default=" + peer,
				"--listen-metrics-urls=",
				"--unsafe-no-fsync=true",
				"--quota-backend-bytes=8589934592",
				"--log-level=warn",
			},
			LogPath: filepath.Join(dir, "logs", "etcd.log"),
		})
		if err != nil {
			return nil, err
		}
		e := &Etcd{URL: client, proc: proc}
		lastErr = proc.WaitReady(ctx, func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, client+"/health", "")
		})
		if lastErr == nil {
			return e, nil
		}
		proc.Kill()
		if !strings.Contains(lastErr.Error(), "address already in use") {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

func (e *Etcd) stop() { e.proc.Stop(10 * time.Second) }

// httpOK returns nil if GET url answers 200.
func httpOK(ctx context.Context, client *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
