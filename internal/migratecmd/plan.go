package migratecmd

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// step is the next thing a cluster's move does, decided from its labels alone (next).
type step int

const (
	// stepDone: the works live on the target transport and nowhere else.
	stepDone step = iota
	// stepStartCopy: label the cluster to copy its works to the target.
	stepStartCopy
	// stepSwitch: wait until the copies are applied, then make the target the home and retire the old works.
	stepSwitch
	// stepFinish: wait until the old works are gone, check the Applications, and clear the move's labels.
	stepFinish
	// stepCancelCopy: the works live on the target but were being copied away; retire those copies.
	stepCancelCopy
	// stepClearRetire: the target's works of an earlier move are being retired; wait until they are gone first.
	stepClearRetire
)

func (s step) String() string {
	return [...]string{"done", "start copy", "switch", "finish", "cancel copy", "clear retire"}[s]
}

// next decides a cluster's next step towards the target transport from where its works are.
func next(m workclient.Move, to string) step {
	switch {
	case m.Home == to && m.CopyTo != "":
		return stepCancelCopy
	case m.Home == to && m.Retire != "":
		return stepFinish
	case m.Home == to:
		return stepDone
	case m.Retire == to:
		return stepClearRetire
	case m.CopyTo == to:
		return stepSwitch
	default:
		return stepStartCopy
	}
}

// plan is what the command found of a cluster before it starts.
type plan struct {
	cluster string
	move    workclient.Move
	// works counts the cluster's works by transport.
	works map[string]int
	step  step
}

func (p plan) done() bool { return p.step == stepDone && p.works[other(p.move.Home)] == 0 }

// plan reads where a cluster's works are.
func (m *migration) plan(ctx context.Context, mc clusterv1.ManagedCluster) (plan, error) {
	move, err := workclient.MoveOf(mc.Labels, m.From)
	if err != nil {
		return plan{}, fmt.Errorf("cluster %s: %w", mc.Name, err)
	}
	p := plan{cluster: mc.Name, move: move, works: map[string]int{}, step: next(move, m.To)}
	for _, t := range workclient.Transports {
		works, err := m.works(ctx, t, mc.Name)
		if err != nil {
			return plan{}, err
		}
		p.works[t] = len(works)
	}
	return p, nil
}

// describe says in words what the move of a cluster will do.
func (p plan) describe(to string) string {
	from := p.move.Home
	switch p.step {
	case stepDone:
		if n := p.works[other(to)]; n > 0 {
			return fmt.Sprintf("nothing to move; %s remain on %s without a move that retires them: see docs/migrate.md", count(n, "work"), other(to))
		}
		return "nothing to do"
	case stepStartCopy:
		return fmt.Sprintf("copy %s to %s, switch to %s, orphan and remove the %s on %s", count(p.works[from], "work"), to, to,
			count(p.works[from], "work"), from)
	case stepSwitch:
		return fmt.Sprintf("(resumed) wait for the copies on %s to be applied, switch to %s, orphan and remove the works on %s", to, to, from)
	case stepFinish:
		return fmt.Sprintf("(resumed) wait until the %s on %s are removed, check the Applications", count(p.works[p.move.Retire], "work"), p.move.Retire)
	case stepCancelCopy:
		return fmt.Sprintf("(cancels a move to %s) orphan and remove the %d copies on %s", p.move.CopyTo, p.works[p.move.CopyTo], p.move.CopyTo)
	case stepClearRetire:
		return fmt.Sprintf("wait until the %s on %s of the earlier move are removed, then copy %s to %s, switch, retire",
			count(p.works[to], "work"), to, count(p.works[from], "work"), to)
	}
	return ""
}

func (m *migration) printPlan(plans []plan) {
	verb := "plan"
	if m.DryRun {
		verb = "plan (dry run: nothing is changed)"
	}
	m.printf("==> %s: move %s to %s\n", verb, count(len(plans), "cluster"), m.To)
	tw := tabwriter.NewWriter(m.out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "CLUSTER\tWORKS LIVE ON\tWORKS ON KUBE\tWORKS ON GRPC\tPLAN")
	for _, p := range plans {
		home := p.move.Home
		if extra := strings.TrimSpace(p.move.CopyTo + " " + p.move.Retire); extra != "" {
			home += " (moving: " + extra + ")"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.cluster, home, p.works[workclient.TransportKube],
			p.works[workclient.TransportGRPC], p.describe(m.To))
	}
	_ = tw.Flush()
}

// count says "1 work", "2 works".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
