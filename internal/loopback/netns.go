package loopback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// NetNS is a private network namespace for processes that listen on every interface (Argo CD's application
// controller binds its metrics port on all of them). Processes join it with Command; Forward makes a loopback
// address of the host reachable at the same address inside it.
type NetNS struct {
	path   string
	holder *Process

	mu        sync.Mutex
	listeners []net.Listener
}

// NetNSSupported reports whether private network namespaces can be made here: as root, with unshare and nsenter.
func NetNSSupported() bool {
	if os.Geteuid() != 0 {
		return false
	}
	for _, bin := range []string{"unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			return false
		}
	}
	return true
}

// NewNetNS makes a private network namespace that lives as long as its holder process (and this process).
func NewNetNS(ctx context.Context, dir, name string) (*NetNS, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("unshare not found: %w", err)
	}
	holder, err := StartProcess(ProcessSpec{
		Name:    "netns-" + name,
		Path:    unshare,
		Args:    []string{"--net", "--", "sleep", "infinity"},
		LogPath: filepath.Join(dir, "logs", "netns-"+name+".log"),
	})
	if err != nil {
		return nil, err
	}
	n := &NetNS{path: "/proc/" + strconv.Itoa(holder.Pid()) + "/ns/net", holder: holder}
	// unshare has exec'd sleep once the namespace differs from ours.
	err = holder.WaitReady(ctx, func(context.Context) error {
		self, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			return err
		}
		theirs, err := os.Readlink(n.path)
		if err != nil {
			return err
		}
		if theirs == self {
			return errors.New("namespace not created yet")
		}
		return nil
	})
	if err == nil {
		err = n.run(ctx, "ip", "link", "set", "lo", "up")
	}
	if err != nil {
		holder.Kill()
		return nil, err
	}
	return n, nil
}

// run runs a command inside the namespace and waits for it.
func (n *NetNS) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.path, "--", name}, args...)...) //nolint:gosec // fixed commands
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v in network namespace: %w: %s", name, args, err, out)
	}
	return nil
}

// Command wraps a process spec so that the process runs inside the namespace.
func (n *NetNS) Command(spec ProcessSpec) ProcessSpec {
	spec.Args = append([]string{"--net=" + n.path, "--", spec.Path}, spec.Args...)
	spec.Path = "nsenter"
	return spec
}

// Forward listens on addr inside the namespace and forwards each connection to the same address on this
// process's (the host's) loopback. The listening socket is created inside the namespace by a thread that
// joins it for that moment; connections are dialled from the host's namespace.
func (n *NetNS) Forward(addr string) error {
	l, err := n.listen(addr)
	if err != nil {
		return err
	}
	n.relay(l, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 10*time.Second) })
	return nil
}

// Expose listens on hostAddr, on the host's loopback, and forwards each connection to innerAddr inside the
// namespace: what a process in the namespace serves becomes reachable from the host (a managed cluster's Argo CD
// redis, for its agent). Connections are dialled from a thread that joins the namespace for that moment.
func (n *NetNS) Expose(hostAddr, innerAddr string) error {
	l, err := net.Listen("tcp", hostAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", hostAddr, err)
	}
	n.relay(l, func() (net.Conn, error) {
		c, err := n.inside(func() (any, error) { return net.DialTimeout("tcp", innerAddr, 10*time.Second) })
		if err != nil {
			return nil, err
		}
		return c.(net.Conn), nil
	})
	return nil
}

// relay accepts connections on l, kept until Stop, and splices each with a connection dial makes.
func (n *NetNS) relay(l net.Listener, dial func() (net.Conn, error)) {
	n.mu.Lock()
	n.listeners = append(n.listeners, l)
	n.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				out, err := dial()
				if err != nil {
					_ = in.Close()
					return
				}
				splice(in, out)
			}()
		}
	}()
}

func (n *NetNS) listen(addr string) (net.Listener, error) {
	l, err := n.inside(func() (any, error) { return net.Listen("tcp", addr) })
	if err != nil {
		return nil, fmt.Errorf("listen on %s in network namespace: %w", addr, err)
	}
	return l.(net.Listener), nil
}

// inside runs fn on a thread that joins the namespace for that moment: a socket it makes belongs to the
// namespace.
func (n *NetNS) inside(fn func() (any, error)) (any, error) {
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		// This goroutine's thread joins the namespace; it is never given back to the scheduler unless it
		// returned to the host namespace, so no other goroutine runs in the private namespace.
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer func() { _ = self.Close() }()
		target, err := os.Open(n.path)
		if err != nil {
			done <- result{err: fmt.Errorf("open network namespace: %w", err)}
			return
		}
		defer func() { _ = target.Close() }()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("join network namespace: %w", err)}
			return
		}
		v, verr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			if c, ok := v.(io.Closer); ok {
				_ = c.Close()
			}
			// The thread stays locked and exits with this goroutine.
			done <- result{err: fmt.Errorf("return to own network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{v: v, err: verr}
	}()
	r := <-done
	return r.v, r.err
}

// splice copies both ways between two connections until one side ends, then closes both.
func splice(in, out net.Conn) {
	defer func() { _ = in.Close() }()
	defer func() { _ = out.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// Stop closes the forwarders and ends the namespace's holder.
func (n *NetNS) Stop() {
	n.mu.Lock()
	for _, l := range n.listeners {
		_ = l.Close()
	}
	n.listeners = nil
	n.mu.Unlock()
	n.holder.Kill()
}
