package badinput

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// tokenCase is a token file that argocd-pull server refuses to start with, and the line it says.
type tokenCase struct {
	kind, file, message string
}

func tokenCases() []tokenCase {
	return []tokenCase{
		{kind: "token line with an unknown kind", file: "t1,admin\nt2,agnet,cluster1\n",
			message: `line 2: unknown kind "agnet" (want agent, source or admin)`},
		{kind: "agent token without its cluster", file: "# agents\nt1,agent\n",
			message: "line 2: an agent token needs the name of its cluster: token,agent,<cluster>"},
		{kind: "source token without its source ID", file: "t1,source,\n", message: "line 1: a source token needs its source ID: token,source,<id>"},
		{kind: "admin token with a name", file: "t1,admin,root\n", message: "line 1: an admin token takes no name: token,admin"},
		{kind: "token line with a single field", file: "t1\n", message: "line 1: want token,kind[,name], got 1 fields"},
		{kind: "the same token twice", file: "t1,admin\nt1,agent,cluster1\n", message: "line 2: duplicate token"},
	}
}

// TestTokenFileInputs starts the argocd-pull binary's server with each bad token file: it exits at once and
// says which line is wrong and why.
func TestTokenFileInputs(t *testing.T) {
	e := fleet(t)
	cert, key, err := e.ClientCertificate("argocd-pull-server")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tokenCases() {
		t.Run(strings.ReplaceAll(c.kind, " ", "_"), func(t *testing.T) {
			tokens := filepath.Join(t.TempDir(), "tokens.csv")
			if err := os.WriteFile(tokens, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			ports, err := loopback.FreePorts(3)
			if err != nil {
				t.Fatal(err)
			}
			addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, e.binary, "server", "--database-url", e.Env.Postgres.URL("argocd_pull"), //nolint:gosec // the binary under test
				"--source-grpc-bind-address", addr(0), "--agent-grpc-bind-address", addr(1), "--http-bind-address", addr(2),
				"--tls-cert-file", cert, "--tls-key-file", key, "--token-file", tokens)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the server ended with %v, want exit code 1; output:\n%s", err, out)
			}
			want := "Error: token file " + tokens + ": " + c.message
			if !strings.Contains(string(out), want) {
				t.Errorf("output:\n%s\nwant %q", out, want)
			}
		})
	}
}
