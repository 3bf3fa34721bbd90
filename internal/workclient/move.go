package workclient

import (
	"fmt"
	"slices"
)

// Labels on a ManagedCluster that say which transport its works live on, and, while `argocd-pull migrate` moves
// the cluster from one transport to the other, where they are copied to or removed from. The controller reads
// them; the migrate command writes them, so that a migration's progress survives the command.
const (
	// LabelTransport names the transport the cluster's works live on: the controller delivers through it and
	// reads the cluster's statuses from it. Without it, the controller's --transport.
	LabelTransport = "argocd-pull.io/transport"
	// LabelCopyTo names a transport the cluster's works are copied to, beside the ones they live on, before the
	// cluster moves there: both agents apply the same Applications, and the hub still reads the statuses from
	// where the works live.
	LabelCopyTo = "argocd-pull.io/copy-works-to"
	// LabelRetire names a transport the cluster's works are removed from after the cluster moved away: each work
	// there is first set to orphan what it applied, then deleted, so the Applications stay on the cluster with
	// the works they now live in.
	LabelRetire = "argocd-pull.io/retire-works-from"
)

// Move is where a cluster's works are, read from its ManagedCluster's labels.
type Move struct {
	// Home is the transport the works live on.
	Home string
	// CopyTo is a transport the works are copied to ("" for none).
	CopyTo string
	// Retire is a transport the works are orphaned and removed from ("" for none).
	Retire string
}

// Moving reports whether the cluster is between two transports.
func (m Move) Moving() bool { return m.CopyTo != "" || m.Retire != "" }

// MoveOf reads a cluster's Move from its ManagedCluster's labels (nil when it has none); defaultHome is the
// controller's --transport. It is an error when a label names no transport or two of them name the same one.
func MoveOf(labels map[string]string, defaultHome string) (Move, error) {
	m := Move{Home: defaultHome, CopyTo: labels[LabelCopyTo], Retire: labels[LabelRetire]}
	if v, ok := labels[LabelTransport]; ok {
		m.Home = v
	}
	for _, l := range []struct{ label, value string }{{LabelTransport, m.Home}, {LabelCopyTo, m.CopyTo}, {LabelRetire, m.Retire}} {
		if (l.value != "" || l.label == LabelTransport) && !slices.Contains(Transports, l.value) {
			return m, fmt.Errorf("label %s=%q names no transport (%s or %s)", l.label, l.value, TransportKube, TransportGRPC)
		}
	}
	if m.CopyTo == m.Home || m.Retire == m.Home || (m.CopyTo != "" && m.CopyTo == m.Retire) {
		return m, fmt.Errorf("labels %s=%q, %s=%q and %s=%q contradict each other: a cluster's works are copied to, or removed "+
			"from, a transport other than the one they live on", LabelTransport, m.Home, LabelCopyTo, m.CopyTo, LabelRetire, m.Retire)
	}
	return m, nil
}

// Transports are the names of the transports.
var Transports = []string{TransportKube, TransportGRPC}
