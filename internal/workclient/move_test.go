package workclient

import (
	"strings"
	"testing"
)

func TestMoveOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   Move
		err    string
	}{
		{name: "no label: the controller's transport", want: Move{Home: TransportKube}},
		{name: "home by label", labels: map[string]string{LabelTransport: TransportGRPC}, want: Move{Home: TransportGRPC}},
		{name: "copying", labels: map[string]string{LabelTransport: TransportKube, LabelCopyTo: TransportGRPC},
			want: Move{Home: TransportKube, CopyTo: TransportGRPC}},
		{name: "retiring", labels: map[string]string{LabelTransport: TransportGRPC, LabelRetire: TransportKube},
			want: Move{Home: TransportGRPC, Retire: TransportKube}},
		{name: "copying without the home label", labels: map[string]string{LabelCopyTo: TransportGRPC},
			want: Move{Home: TransportKube, CopyTo: TransportGRPC}},
		{name: "unknown transport", labels: map[string]string{LabelTransport: "mqtt"}, err: `label argocd-pull.io/transport="mqtt" names no transport`},
		{name: "empty home label", labels: map[string]string{LabelTransport: ""}, err: "names no transport"},
		{name: "copy to home", labels: map[string]string{LabelCopyTo: TransportKube}, err: "contradict"},
		{name: "retire home", labels: map[string]string{LabelTransport: TransportGRPC, LabelRetire: TransportGRPC}, err: "contradict"},
		{name: "copy and retire the same", labels: map[string]string{LabelCopyTo: TransportGRPC, LabelRetire: TransportGRPC}, err: "contradict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MoveOf(tc.labels, TransportKube)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("MoveOf = %+v, %v; want %+v", got, err, tc.want)
			}
			if got.Moving() != (tc.want.CopyTo != "" || tc.want.Retire != "") {
				t.Errorf("Moving = %v", got.Moving())
			}
		})
	}
}
