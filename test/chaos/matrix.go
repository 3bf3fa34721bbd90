package main

import "github.com/argocd-pull/argocd-pull/internal/localfleet"

// Components of the chaos fleet.
var (
	controller = localfleet.ComponentController
	// server1 serves half the agents; server2 the controller and the other half.
	server1, server2 = localfleet.ComponentServerInstance(1), localfleet.ComponentServerInstance(2)
	postgres         = localfleet.ComponentPostgres
	realAgent        = localfleet.ComponentAgent("cluster1")
	// simulator1 and simulator2 each run half the simulated clusters (their agents).
	simulator1, simulator2 = localfleet.ComponentSimulator(1), localfleet.ComponentSimulator(2)
)

// baseline is the case without a fault: it gives the pace that backlogs are measured with.
var baseline = Case{Name: "none (baseline)"}

// matrix is `make chaos`: every process kind killed, two killed and brought back in both orders, a
// PostgreSQL restart, and a network cut and a partition on every link, each during a rollout and during its
// mass delete.
func matrix() []Case {
	return []Case{
		baseline,
		kill("controller", controller),
		kill("server instance 1 (agents)", server1),
		kill("server instance 2 (controller, agents)", server2),
		kill("PostgreSQL", postgres),
		kill("agent of a real cluster", realAgent),
		kill("simulator (half the simulated clusters)", simulator1),
		{Name: "controller and server 2; controller back first", Down: []string{server2, controller}, Up: []string{controller, server2}},
		{Name: "controller and server 2; server back first", Down: []string{controller, server2}, Up: []string{server2, controller}},
		{Name: "server 1 and PostgreSQL; server back first", Down: []string{postgres, server1}, Up: []string{server1, postgres}},
		{Name: "server 1 and PostgreSQL; PostgreSQL back first", Down: []string{server1, postgres}, Up: []string{postgres, server1}},
		{Name: "controller and simulator 2; controller back first", Down: []string{simulator2, controller}, Up: []string{controller, simulator2}},
		{Name: "controller and simulator 2; simulator back first", Down: []string{controller, simulator2}, Up: []string{simulator2, controller}},
		{Name: "PostgreSQL restart (fast shutdown)", Down: []string{postgres}, Up: []string{postgres}, Fault: Stop},
		kill("network cut: agents ↔ servers", localfleet.ComponentNetworkAgents),
		kill("network cut: controller ↔ server", localfleet.ComponentNetworkController),
		kill("network cut: servers ↔ PostgreSQL", localfleet.ComponentNetworkPostgres),
		partition("network partition: agents ↔ servers", localfleet.ComponentNetworkAgents),
		partition("network partition: controller ↔ server", localfleet.ComponentNetworkController),
		partition("network partition: servers ↔ PostgreSQL", localfleet.ComponentNetworkPostgres),
	}
}

// subset is what every `go test ./...` runs: a double fault with the controller back last, a cut of the
// controller's link (its reconciles fail while it lasts) and a silent partition of the agents' link.
func subset() []Case {
	return []Case{
		baseline,
		{Name: "controller and server 2; server back first", Down: []string{controller, server2}, Up: []string{server2, controller}},
		kill("network cut: controller ↔ server", localfleet.ComponentNetworkController),
		partition("network partition: agents ↔ servers", localfleet.ComponentNetworkAgents),
	}
}

// kill is the case of one component killed (a network link cut) and brought back.
func kill(name, component string) Case {
	return Case{Name: name, Down: []string{component}, Up: []string{component}}
}

// partition is the case of a network link whose traffic is dropped silently, then restored.
func partition(name, link string) Case {
	return Case{Name: name, Down: []string{link}, Up: []string{link}, Fault: Partition}
}
