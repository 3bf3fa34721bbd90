package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// markdown renders the results as the table of docs/benchmarks.md.
func markdown(results []*Result, command, machine string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`\n\nMachine: %s\n\n", command, machine)
	b.WriteString("| | " + strings.Join(headers(results), " | ") + " |\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	row := func(name string, f func(*Result) string) {
		cells := make([]string, len(results))
		for i, r := range results {
			cells[i] = f(r)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(cells, " | "))
	}
	for _, r := range results {
		if r.Stopped != "" {
			row("stopped before the end", func(r *Result) string {
				if r.Stopped == "" {
					return "no"
				}
				return strings.ReplaceAll(r.Stopped, "|", "/")
			})
			break
		}
	}
	row("hub apiserver: watch cache of Applications", func(r *Result) string {
		return map[bool]string{true: "off", false: "on"}[r.Scenario.NoWatchCache]
	})
	for _, r := range results {
		if r.Scenario.ControllerMemoryLimit > 0 || r.Scenario.ServerMemoryLimit > 0 {
			row("container memory limit as set (GOMEMLIMIT 90 % of it): controller / server", func(r *Result) string {
				return memoryLimitText(r.Scenario.ControllerMemoryLimit) + " / " + memoryLimitText(r.Scenario.ServerMemoryLimit)
			})
			break
		}
	}
	for _, r := range results {
		if r.Scenario.HubAPIServerMemoryLimit > 0 {
			row("hub apiserver: container memory limit as set (GOMEMLIMIT 90 % of it)", func(r *Result) string {
				return memoryLimitText(r.Scenario.HubAPIServerMemoryLimit)
			})
			break
		}
	}
	for _, r := range results {
		if len(r.Scenario.CPURequests) > 0 {
			row("CPU requests, as each process's cgroup's cpu.shares", func(r *Result) string {
				if len(r.Scenario.CPURequests) == 0 {
					return "none (one cgroup for all)"
				}
				return strings.ReplaceAll(r.Scenario.CPURequests.String(), ",", ", ")
			})
			break
		}
	}
	row("floor: create + one status write per Application", func(r *Result) string { return dur(r.Floor) })
	row("floor: hub apiserver peak RSS", func(r *Result) string {
		if r.FloorAPIServerPeakRSS == 0 {
			return "–"
		}
		return mib(r.FloorAPIServerPeakRSS)
	})
	row("Applications created", func(r *Result) string {
		if r.CreateTime == 0 {
			return dur(r.CreateTime)
		}
		return fmt.Sprintf("%s (%d clients)", dur(r.CreateTime), r.Scenario.creators())
	})
	row("every work delivered", func(r *Result) string { return dur(r.Delivered) })
	row("every hub Application Synced/Healthy", func(r *Result) string { return dur(r.Synced) })
	row("hub writes that trail the rollout (reports) ended", func(r *Result) string { return dur(r.Settled) })
	row("ratio to the floor", func(r *Result) string {
		if r.Ratio() == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", r.Ratio())
	})
	// The hub's cost per Application, in CPU time (comparable from run to run on a shared machine, where wall
	// time is not) and in apiserver requests, beside the floor's for the same Applications.
	perApp := func(v float64, r *Result) float64 { return v / float64(r.Applications) }
	row("hub-side CPU ms per Application: fleet / floor", func(r *Result) string {
		if r.SyncedCPU == 0 || r.FloorCPU == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f / %.1f (%.2f×)", 1000*perApp(r.SyncedCPU, r), 1000*perApp(r.FloorCPU, r), r.SyncedCPU/r.FloorCPU)
	})
	for _, p := range cpuProcessNames(results) {
		row("  CPU ms per Application until Synced: "+p+" (fleet / floor)", func(r *Result) string {
			v, ok := r.SyncedProcessCPU[p]
			if !ok {
				return "–"
			}
			floor := "–"
			if f, ok := r.FloorProcessCPU[p]; ok {
				floor = fmt.Sprintf("%.1f", 1000*perApp(f, r))
			}
			return fmt.Sprintf("%.1f / %s", 1000*perApp(v, r), floor)
		})
	}
	row("hub Application size, JSON bytes (fleet / floor)", func(r *Result) string {
		if r.AppBytes == 0 {
			return "–"
		}
		return fmt.Sprintf("%d / %d", r.AppBytes, r.FloorAppBytes)
	})
	for _, k := range requestKinds(results) {
		row("hub requests per Application until Synced: "+k+" (fleet / floor)", func(r *Result) string {
			if r.SyncedRequests == nil {
				return "–"
			}
			return fmt.Sprintf("%.2f / %.2f", perApp(r.SyncedRequests[k], r), perApp(r.FloorRequests[k], r))
		})
	}
	row("hub apiserver: watches of Applications closed as too slow / lists of Applications streamed / LIST pages of Applications, until Synced", func(r *Result) string {
		if r.SyncedRequests == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f / %.0f / %.0f", r.SyncedRequests[closedWatches], r.SyncedRequests[streamedLists], r.SyncedRequests["LIST applications"])
	})
	// The kube transport's works are watched on the hub by the controller and by the simulator (one watch of
	// every cluster's works); a closed watch resumes, or lists every work again when it fell too far behind.
	row("hub apiserver: watches of ManifestWorks closed as too slow / LISTs of ManifestWorks, until Synced", func(r *Result) string {
		if r.SyncedRequests == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f / %.0f", r.SyncedRequests[closedWorkWatches], r.SyncedRequests["LIST manifestworks"])
	})
	// The fleet is watched at rest once every Application is Synced/Healthy, and orphans are counted once
	// everything is deleted: a run that stopped before has no figure for them.
	row("at rest: status events / min", func(r *Result) string {
		return ifMeasured(r.Synced != 0, fmt.Sprintf("%.0f", r.RestStatusEvents))
	})
	row("at rest: hub writes / min (without the apiserver's own lease renewals; refused); Events written, by writer", func(r *Result) string {
		return ifMeasured(r.Synced != 0, fmt.Sprintf("%.0f", r.RestHubWrites)+refusedText(r.RestRefusedWrites)+eventWritersText(r.RestEventWriters))
	})
	row("status latency p50 / p99 (churn)", func(r *Result) string {
		if r.LatencySamples == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s (%d changes)", ms(r.LatencyP50), ms(r.LatencyP99), r.LatencySamples)
	})
	row("status latency: the hub's part p99; slowest; changes over 1 s", func(r *Result) string {
		if r.LatencySamples == 0 {
			return "–"
		}
		return fmt.Sprintf("%s; %s; %d", ms(r.LatencyHubP99), ms(r.LatencyMax), r.LatencyOverSecond)
	})
	row("console: streams open; server RSS with them", func(r *Result) string {
		if r.Console == nil {
			return "–"
		}
		return fmt.Sprintf("%d; %s", r.Console.Streams, mib(r.Console.ServerRSSBytes))
	})
	row("console: tree p50 / p99 (held answer p50)", func(r *Result) string {
		if r.Console == nil || r.Console.Samples == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s (%s), %d Applications", ms(r.Console.TreeP50), ms(r.Console.TreeP99), ms(r.Console.HeldP50), r.Console.Samples)
	})
	row("console: live Pod manifest p50 / p99", func(r *Result) string {
		if r.Console == nil || r.Console.Samples == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s", ms(r.Console.LiveP50), ms(r.Console.LiveP99))
	})
	for _, process := range []string{"controller", "server"} {
		restart := func(r *Result) (restartResult, bool) {
			for _, rr := range r.Restarts {
				if rr.Process == process {
					return rr, true
				}
			}
			return restartResult{}, false
		}
		row(process+" restarted at rest (SIGKILL): ready; caught up; the hub quiet again", func(r *Result) string {
			rr, ok := restart(r)
			return ifMeasured(ok, fmt.Sprintf("%s; %s; %s", dur(rr.Ready), dur(rr.CaughtUp), dur(rr.Settled)))
		})
		row("  its hub writes by resource (refused; Events by writer); works applied and statuses sent by the clusters", func(r *Result) string {
			rr, ok := restart(r)
			return ifMeasured(ok, fmt.Sprintf("%s%s%s; %.0f, %.0f", writesText(rr.HubWrites), refusedText(rr.RefusedWrites),
				eventWritersText(rr.EventWriters), rr.WorksApplied, rr.StatusUpdates))
		})
		row("  hub-side CPU ms per Application (of which the "+process+"); its peak RSS", func(r *Result) string {
			rr, ok := restart(r)
			n := float64(r.Applications)
			return ifMeasured(ok, fmt.Sprintf("%.2f (%.2f); %s", 1000*hubSide(rr.ProcessCPU)/n, 1000*rr.ProcessCPU[process]/n, mib(rr.PeakRSS)))
		})
	}
	for _, r := range results {
		if r.KilledInCreate == nil {
			continue
		}
		row("controller killed (SIGKILL) in the creates: Applications created by then; the new one ready; its list streamed; reconciling; caught up with them", func(r *Result) string {
			k := r.KilledInCreate
			if k == nil {
				return "–"
			}
			return fmt.Sprintf("%d (after %s); %s; %s; %s; %s", k.Created, dur(k.At), dur(k.Ready), dur(k.Listed), dur(k.Reconciling), dur(k.CaughtUp))
		})
		row("  until caught up: watches of Applications closed / lists of Applications streamed / LIST pages of Applications; the new one's peak RSS until Synced", func(r *Result) string {
			k := r.KilledInCreate
			if k == nil {
				return "–"
			}
			return fmt.Sprintf("%.0f / %.0f / %.0f; %s", k.Requests[closedWatches], k.Requests[streamedLists], k.Requests["LIST applications"], mib(k.PeakRSS))
		})
		break
	}
	row("delete: no work left", func(r *Result) string { return dur(r.DeleteWorks) })
	row("delete: no Application anywhere", func(r *Result) string { return dur(r.DeleteApps) })
	for _, r := range results {
		if r.DeleteStopped > 0 {
			row("delete stopped before its end: after; Applications gone from the hub by then", func(r *Result) string {
				return ifMeasured(r.DeleteStopped > 0, fmt.Sprintf("%s; %d of %d", dur(r.DeleteStopped), r.DeleteGone, r.Applications))
			})
			break
		}
	}
	row("delete floor: delete + finalizer off per Application", func(r *Result) string { return dur(r.DeleteFloor) })
	row("delete: ratio to the delete floor", func(r *Result) string {
		if r.DeleteRatio() == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", r.DeleteRatio())
	})
	// perDeleted is per Application gone from the hub: every one once the delete ended, those gone by then when a
	// run was stopped in it. The delete floor deletes every Application.
	perDeleted := func(v float64, r *Result) float64 { return v / float64(r.DeleteGone) }
	deleteMeasured := func(r *Result) bool { return r.DeleteGone > 0 && (r.DeleteApps != 0 || r.DeleteStopped != 0) }
	row("hub-side CPU ms per deleted Application: fleet / delete floor", func(r *Result) string {
		fleet, floor := hubSide(r.DeleteProcessCPU), hubSide(r.DeleteFloorProcessCPU)
		if !deleteMeasured(r) || fleet == 0 {
			return "–"
		}
		if floor == 0 {
			return fmt.Sprintf("%.1f / –", 1000*perDeleted(fleet, r))
		}
		return fmt.Sprintf("%.1f / %.1f (%.2f×)", 1000*perDeleted(fleet, r), 1000*perApp(floor, r), perDeleted(fleet, r)/perApp(floor, r))
	})
	for _, p := range cpuProcessNames(results) {
		row("  CPU ms per deleted Application: "+p+" (fleet / delete floor)", func(r *Result) string {
			v, ok := r.DeleteProcessCPU[p]
			if !ok || !deleteMeasured(r) {
				return "–"
			}
			floor := "–"
			if f, ok := r.DeleteFloorProcessCPU[p]; ok {
				floor = fmt.Sprintf("%.1f", 1000*perApp(f, r))
			}
			return fmt.Sprintf("%.1f / %s", 1000*perDeleted(v, r), floor)
		})
	}
	for _, k := range deleteRequestKinds(results) {
		row("hub requests per deleted Application: "+k+" (fleet / delete floor)", func(r *Result) string {
			if r.DeleteRequests == nil || !deleteMeasured(r) {
				return "–"
			}
			return fmt.Sprintf("%.2f / %.2f", perDeleted(r.DeleteRequests[k], r), perApp(r.DeleteFloorRequests[k], r))
		})
	}
	row("hub apiserver: watches of Applications closed as too slow / lists of Applications streamed / LIST pages of Applications, in the delete", func(r *Result) string {
		if r.DeleteRequests == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f / %.0f / %.0f", r.DeleteRequests[closedWatches], r.DeleteRequests[streamedLists], r.DeleteRequests["LIST applications"])
	})
	row("hub apiserver: watches of ManifestWorks closed as too slow / LISTs of ManifestWorks, in the delete", func(r *Result) string {
		if r.DeleteRequests == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f / %.0f", r.DeleteRequests[closedWorkWatches], r.DeleteRequests["LIST manifestworks"])
	})
	row("orphaned works", func(r *Result) string { return ifMeasured(r.DeleteApps != 0, fmt.Sprint(r.Orphans)) })
	row("the benchmark's requests sent again after a transient apiserver error (floors, creates)", func(r *Result) string { return fmt.Sprint(r.Retries) })
	for _, p := range processNames(results) {
		row(p+": peak RSS / CPU s", func(r *Result) string {
			u, ok := r.Usage[p]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%s / %.0f", mib(u.PeakRSSBytes), u.CPUSeconds)
		})
	}
	row("PostgreSQL database size", func(r *Result) string {
		if r.PostgresBytes == 0 {
			return "–"
		}
		return mib(r.PostgresBytes)
	})
	for _, verb := range []string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "APPLY", "DELETE"} {
		row("hub apiserver requests: "+verb, func(r *Result) string { return fmt.Sprintf("%.0f", r.Requests[verb]) })
	}
	return b.String()
}

// requestKinds are the "verb resource" request counts the table shows per Application: the writes and the
// reads that are not watches, of any resource the fleet or the floor touched at least once per 100
// Applications. (Argo CD's Application has no status subresource: its status is written with PATCH
// applications.)
func requestKinds(results []*Result) []string {
	return kindsOf(results, func(r *Result) []requestCounts { return []requestCounts{r.SyncedRequests, r.FloorRequests} })
}

// deleteRequestKinds are the "verb resource" request counts of the delete and its floor, as requestKinds.
func deleteRequestKinds(results []*Result) []string {
	return kindsOf(results, func(r *Result) []requestCounts { return []requestCounts{r.DeleteRequests, r.DeleteFloorRequests} })
}

// kindsOf are the "verb resource" keys, watches left out and the refused writes in (as "REFUSED resource"), that
// come to at least one per 100 Applications in any of the counts of any result.
func kindsOf(results []*Result, counts func(*Result) []requestCounts) []string {
	seen := map[string]bool{}
	for _, r := range results {
		for _, c := range counts(r) {
			for k, v := range c {
				verb, _, ok := strings.Cut(k, " ")
				if ok && !strings.HasPrefix(verb, "WATCH") && v*100 >= float64(r.Applications) {
					seen[k] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func headers(results []*Result) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = fmt.Sprintf("%d × %d, %s", r.Scenario.Clusters, r.Scenario.AppSets, r.Scenario.Transport)
	}
	return out
}

// cpuProcessNames are the processes whose CPU until Synced was measured, the simulator and the benchmark last.
func cpuProcessNames(results []*Result) []string {
	seen := map[string]bool{}
	for _, r := range results {
		for p := range r.SyncedProcessCPU {
			seen[p] = true
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	notHub := func(p string) bool { return p == simulatorProcess || p == benchmarkProcess }
	sort.Slice(out, func(i, j int) bool {
		if notHub(out[i]) != notHub(out[j]) {
			return notHub(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

func processNames(results []*Result) []string {
	seen := map[string]bool{}
	for _, r := range results {
		for p := range r.Usage {
			seen[p] = true
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func dur(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return d.Round(100 * time.Millisecond).String()
}

// ifMeasured is value, or "–" for a figure the run did not get to.
func ifMeasured(measured bool, value string) string {
	if !measured {
		return "–"
	}
	return value
}

// writesText is "applications 2, leases 3" for writes by resource, most first; "none" without any.
func writesText(writes map[string]float64) string {
	if len(writes) == 0 {
		return "none"
	}
	return countsText(writes)
}

// refusedText is " (refused: events 6)" for the writes the apiserver refused, and empty when it refused none.
func refusedText(writes map[string]float64) string {
	if len(writes) == 0 {
		return ""
	}
	return " (refused: " + countsText(writes) + ")"
}

// countsText is "a 3, b 2" for counts by name, most first, names in order among equal counts.
func countsText[V int | float64](counts map[string]V) string {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.0f", name, float64(counts[name]))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// memoryLimitText is a container memory limit as set: none for 0.
func memoryLimitText(limit int64) string {
	if limit <= 0 {
		return "none"
	}
	return mib(limit)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// eventWritersText is "; placement-controller 20, …" for the Events written at rest, most first.
func eventWritersText(writers map[string]int) string {
	if len(writers) == 0 {
		return ""
	}
	return "; " + countsText(writers)
}
