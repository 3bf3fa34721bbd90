package loopback

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Relay forwards the TCP connections it accepts on a loopback port to a target address, byte for byte, and
// can cut that link as a network fault would: Cut resets every connection it carries and refuses new ones
// (each is accepted and reset at once) until Restore. Clients that connect through it see their connections
// drop and their reconnects fail, while both ends keep running.
type Relay struct {
	// Addr is where clients connect instead of the target.
	Addr   string
	target string
	l      net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartRelay relays a new loopback port to target.
func StartRelay(target string) (*Relay, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for a relay to %s: %w", target, err)
	}
	r := &Relay{Addr: l.Addr().String(), target: target, l: l, conns: map[net.Conn]struct{}{}}
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
		if !r.track(c) {
			reset(c)
			continue
		}
		r.wg.Add(1)
		go r.forward(c)
	}
}

// track adds a connection to those the relay carries; false while the link is cut.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

// forward copies both ways between a client and a new connection to the target, until either side ends.
func (r *Relay) forward(client net.Conn) {
	defer r.wg.Done()
	server, err := net.Dial("tcp", r.target)
	if err != nil || !r.track(server) {
		if server != nil {
			reset(server)
		}
		r.untrack(client)
		reset(client)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	r.untrack(client, server)
}

// Cut resets every connection the relay carries and refuses new ones until Restore.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		reset(c)
		delete(r.conns, c)
	}
}

// Restore lets connections through again.
func (r *Relay) Restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = false
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
