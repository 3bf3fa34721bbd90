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
	row("floor: create + one status write per Application", func(r *Result) string { return dur(r.Floor) })
	row("Applications created (64 clients)", func(r *Result) string { return dur(r.CreateTime) })
	row("every work delivered", func(r *Result) string { return dur(r.Delivered) })
	row("every hub Application Synced/Healthy", func(r *Result) string { return dur(r.Synced) })
	row("ratio to the floor", func(r *Result) string {
		if r.Ratio() == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", r.Ratio())
	})
	// The fleet is watched at rest once every Application is Synced/Healthy, and orphans are counted once
	// everything is deleted: a run that stopped before has no figure for them.
	row("at rest: status events / min", func(r *Result) string {
		return ifMeasured(r.Synced != 0, fmt.Sprintf("%.0f", r.RestStatusEvents))
	})
	row("at rest: hub writes / min (without the apiserver's own lease renewals)", func(r *Result) string {
		return ifMeasured(r.Synced != 0, fmt.Sprintf("%.0f", r.RestHubWrites))
	})
	row("status latency p50 / p99 (churn)", func(r *Result) string {
		if r.LatencySamples == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s (%d changes)", ms(r.LatencyP50), ms(r.LatencyP99), r.LatencySamples)
	})
	row("delete: no work left", func(r *Result) string { return dur(r.DeleteWorks) })
	row("delete: no Application anywhere", func(r *Result) string { return dur(r.DeleteApps) })
	row("orphaned works", func(r *Result) string { return ifMeasured(r.DeleteApps != 0, fmt.Sprint(r.Orphans)) })
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

func headers(results []*Result) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = fmt.Sprintf("%d × %d, %s", r.Scenario.Clusters, r.Scenario.AppSets, r.Scenario.Transport)
	}
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

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
