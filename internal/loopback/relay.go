package loopback

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Relay forwards the TCP connections it accepts on a loopback port to a target address, byte for byte, and
// can break that link as a network fault would:
//   - Cut resets every connection it carries and refuses new ones (each is accepted and reset at once) until
//     Restore: both ends see their connections drop and their reconnects fail.
//   - Partition drops every byte silently, both ways, and holds new connections without answering, until
//     Restore; the connections it carried are lost for good, as when a NAT or a load balancer forgets a flow:
//     nothing arrives on them ever again and neither end is told. An end finds out only by its own means
//     (keepalives, timeouts); connections made after the Restore work.
//   - Stall holds every byte, both ways, until Restore, and then delivers them all: the link is slow, not lost,
//     as a peer that stops reading for a while (a saturated process, a long pause) looks to the other end.
type Relay struct {
	// Addr is where clients connect instead of the target.
	Addr   string
	target string
	l      net.Listener
	// accepted counts the connections accepted.
	accepted atomic.Int64

	mu          sync.Mutex
	cut         bool
	partitioned bool
	// stalled is closed when a stall ends; nil while there is none.
	stalled chan struct{}
	links   map[*link]struct{}
	wg      sync.WaitGroup
}

// link is one relayed connection: the client's and the one to the target (nil while partitioned).
type link struct {
	client, server net.Conn
	// lost: its bytes are dropped, for good.
	lost atomic.Bool
}

// StartRelay relays a new loopback port to target.
func StartRelay(target string) (*Relay, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for a relay to %s: %w", target, err)
	}
	r := &Relay{Addr: l.Addr().String(), target: target, l: l, links: map[*link]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.accepted.Add(1)
		r.wg.Add(1)
		go r.serve(c)
	}
}

// serve relays one client connection until either end closes it or the relay resets it.
func (r *Relay) serve(client net.Conn) {
	defer r.wg.Done()
	l := &link{client: client}
	r.mu.Lock()
	cut, partitioned := r.cut, r.partitioned
	if !cut {
		r.links[l] = struct{}{}
	}
	r.mu.Unlock()
	switch {
	case cut:
		reset(client)
		return
	case partitioned:
		l.lost.Store(true)
		r.drain(l, client)
		return
	}
	server, err := net.Dial("tcp", r.target)
	if err != nil {
		r.close(l)
		return
	}
	r.mu.Lock()
	l.server = server
	_, tracked := r.links[l]
	r.mu.Unlock()
	if !tracked { // cut meanwhile
		reset(server)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.pipe(l, server, client)
	}()
	r.pipe(l, client, server)
	<-done
}

// pipe copies src to dst until src ends. On a lost link it drops what it reads; the end of the target's side
// then reaches nobody (the client is not told), while the client's end closes everything.
func (r *Relay) pipe(l *link, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.waitStall()
		}
		if n > 0 && !l.lost.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err == nil {
			continue
		}
		if l.lost.Load() && src != l.client {
			_ = src.Close()
			return
		}
		r.close(l)
		return
	}
}

// waitStall returns once no stall holds the relay's bytes.
func (r *Relay) waitStall() {
	r.mu.Lock()
	stalled := r.stalled
	r.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
}

// drain reads and drops what the client of a lost link sends, until it closes.
func (r *Relay) drain(l *link, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := client.Read(buf); err != nil {
			r.close(l)
			return
		}
	}
}

// close closes both ends of a link and forgets it.
func (r *Relay) close(l *link) {
	r.mu.Lock()
	delete(r.links, l)
	server := l.server
	r.mu.Unlock()
	_ = l.client.Close()
	if server != nil {
		_ = server.Close()
	}
}

// Cut resets every connection the relay carries, lost ones included, and refuses new ones until Restore.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	r.endStall()
	for l := range r.links {
		reset(l.client)
		if l.server != nil {
			reset(l.server)
		}
		delete(r.links, l)
	}
}

// Partition drops every byte silently and holds new connections until Restore; the connections carried now
// are lost for good.
func (r *Relay) Partition() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partitioned = true
	for l := range r.links {
		l.lost.Store(true)
	}
}

// Accepted is how many connections the relay has accepted: a client that connected again counts twice.
func (r *Relay) Accepted() int64 { return r.accepted.Load() }

// Stall holds every byte the relay's connections carry, and those of new ones, until Restore.
func (r *Relay) Stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled == nil {
		r.stalled = make(chan struct{})
	}
}

// Restore lets new connections through again and ends a stall.
func (r *Relay) Restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut, r.partitioned = false, false
	r.endStall()
}

// endStall lets held bytes go on; r.mu is held.
func (r *Relay) endStall() {
	if r.stalled != nil {
		close(r.stalled)
		r.stalled = nil
	}
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() {
	_ = r.l.Close()
	r.Cut()
	r.wg.Wait()
}

// reset closes a connection with a TCP reset, as a broken link shows to its ends.
func reset(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}
