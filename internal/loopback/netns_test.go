package loopback

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNetNS: a process in the namespace cannot be reached from the host, a forwarded host address can be
// reached from inside it, a listener on every interface inside it does not show on the host, and an exposed one
// does, on the host address asked for.
func TestNetNS(t *testing.T) {
	if !NetNSSupported() {
		t.Skip("private network namespaces need root, unshare, nsenter and ip")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, err := NewNetNS(ctx, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()

	// A host server, forwarded into the namespace at the same address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "from the host") }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()
	if err := n.Forward(l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	out, err := inNS(ctx, n, "python3", "-c", "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://"+l.Addr().String()+"').read().decode())")
	if err != nil || out != "from the host" {
		t.Fatalf("reach the host from the namespace: %q, %v", out, err)
	}

	// A server on every interface inside the namespace is not on the host.
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartProcess(n.Command(ProcessSpec{Name: "inner", Path: "python3", Args: []string{"-m", "http.server", "--bind", "0.0.0.0", itoa(port)}, LogPath: dir + "/logs/inner.log"}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if _, err := inNS(ctx, n, "python3", "-c", "import socket,time\nfor i in range(100):\n  try:\n    socket.create_connection(('127.0.0.1',"+itoa(port)+"),1); break\n  except OSError: time.sleep(0.05)\nelse: raise SystemExit(1)"); err != nil {
		t.Fatalf("inner server not up: %v", err)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+itoa(port), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a server inside the namespace is reachable from the host")
	}

	// Exposed, it is: on the host address asked for.
	hostPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Expose("127.0.0.1:"+itoa(hostPort), "127.0.0.1:"+itoa(port)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://127.0.0.1:" + itoa(hostPort) + "/") //nolint:noctx // a test on loopback
	if err != nil {
		t.Fatalf("reach the exposed server from the host: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Directory listing") {
		t.Fatalf("the exposed server answered %s: %.200s", resp.Status, body)
	}
}

// inNS runs a command inside the namespace and returns its output.
func inNS(ctx context.Context, n *NetNS, name string, args ...string) (string, error) {
	b, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.path, "--", name}, args...)...).Output() //nolint:gosec // test commands
	return strings.TrimSpace(string(b)), err
}

func itoa(i int) string { return strconv.Itoa(i) }
