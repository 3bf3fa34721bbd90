package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/sim"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// simulator is the fleet simulator, `argocd-pull sim`, in a process of its own: its memory and CPU are
// measured apart from the benchmark's (the tracker and the clients that create the Applications). The
// benchmark reads its counts from its metrics and drives it through its controls (sim.Options.MetricsAddress).
type simulator struct {
	proc *loopback.Process
	// base is the URL of its metrics and controls.
	base string
	http *http.Client
}

// simStats are the simulator's counts the benchmark reads.
type simStats struct {
	Connected, Works, Applications int64
	StatusUpdates, WorksApplied    float64
}

// simulatorMemoryLimit caps the simulator's heap. It runs with a GOGC of 400 (sim.DefaultGCPercent), which lets
// the heap grow to five times what is live: at 3,000 clusters (2.1 GB in use at rest at 1256c6d) more than this
// machine has to spare beside the hub. Near the limit the collector runs as often as it must to stay under it.
const simulatorMemoryLimit = "GOMEMLIMIT=6GiB"

func startSimulator(ctx context.Context, sc Scenario, f *localfleet.System, clusters []string) (*simulator, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"sim", "--transport", sc.Transport, "--clusters", strconv.Itoa(len(clusters)),
		"--cluster-prefix", "cluster", "--cluster-start", "1", "--sync-delay", sc.SyncDelay.String(), "--sync-jitter", "0.2",
		"--resources-per-app", strconv.Itoa(simResourcesPerApp), "--metrics-address", addr}
	if sc.Console {
		args = append(args, "--console")
	}
	if sc.Transport == workclient.TransportGRPC {
		// Each simulated cluster authenticates as its own agent, with its token from the server's token file. The
		// config's own token (the first cluster's, which the others replace with theirs) turns on TLS in sdk-go.
		config := filepath.Join(sc.Dir, "simulator-grpc.yaml")
		content := fmt.Sprintf("url: %s\ncaFile: %s\ntoken: %s\n", f.Server.Agent, f.CAFile(), f.AgentToken(clusters[0]))
		if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--grpc-config", config, "--agent-token-file", f.TokenFile())
	} else {
		args = append(args, "--hub-kubeconfig", f.Env.Hub.Kubeconfig,
			fmt.Sprintf("--kube-api-qps=%g", sc.QPS), fmt.Sprintf("--kube-api-burst=%d", sc.Burst))
	}
	p, err := loopback.StartProcess(loopback.ProcessSpec{Name: "simulator", Path: sc.Binary, Args: args,
		Env: []string{simulatorMemoryLimit}, LogPath: filepath.Join(sc.Dir, "simulator.log")})
	if err != nil {
		return nil, err
	}
	s := &simulator{proc: p, base: "http://" + addr, http: &http.Client{}}
	err = waitFor(ctx, 10*time.Minute, func() (bool, string) {
		st, err := s.stats(ctx)
		if err != nil {
			return false, fmt.Sprintf("simulator: %v", err)
		}
		return st.Connected >= int64(len(clusters)), fmt.Sprintf("simulator: %d/%d clusters connected", st.Connected, len(clusters))
	}, sc.Log)
	if err != nil {
		s.stop()
		return nil, err
	}
	sc.Log("simulator: %d clusters connected", len(clusters))
	return s, nil
}

func (s *simulator) stop() { s.proc.Stop(10 * time.Second) }

func (s *simulator) pid() int { return s.proc.Pid() }

// stats scrapes the simulator's metrics.
func (s *simulator) stats(ctx context.Context) (simStats, error) {
	var st simStats
	err := scrapeMetrics(ctx, s.http, s.base+"/metrics", func(name, _ string, v float64) {
		switch name {
		case "argocd_pull_sim_clusters_connected":
			st.Connected = int64(v)
		case "argocd_pull_sim_works":
			st.Works = int64(v)
		case "argocd_pull_sim_applications":
			st.Applications = int64(v)
		case "argocd_pull_sim_status_updates_total":
			st.StatusUpdates = v
		case "argocd_pull_sim_works_applied_total":
			st.WorksApplied = v
		}
	})
	return st, err
}

// setChurn sets the simulator's random status changes per second.
func (s *simulator) setChurn(ctx context.Context, perSecond float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/churn?perSecond=%g", s.base, perSecond), nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set churn: %s", resp.Status)
	}
	return nil
}

// events calls f with each status the simulator sends, from now until the returned function is called.
func (s *simulator) events(ctx context.Context, f func(sim.Event)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/events", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("simulator events: %s", resp.Status)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = resp.Body.Close() }()
		dec := json.NewDecoder(resp.Body)
		for {
			var e sim.Event
			if err := dec.Decode(&e); err != nil {
				return
			}
			f(e)
		}
	}()
	return func() { cancel(); <-done }, nil
}
