package server

import (
	"net"
	"sync"
)

// connListener keeps the connections it accepted by their remote address, so that the server can close one:
// the agent endpoint closes the connection of an agent that subscribed and never resynced
// (Options.AgentResyncGrace). gRPC does not let a handler close its transport, and only a closed connection
// makes sdk-go's client start over: a stream that ends unread goes unnoticed by a client whose receiver is
// not running. (gRPC sets TCP_USER_TIMEOUT on the *net.TCPConn it accepts, not on a wrapped one; its
// keepalive pings still close a connection whose peer is gone.)
type connListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*trackedConn
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[string]*trackedConn{}}
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l, addr: c.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tc.addr] = tc
	l.mu.Unlock()
	return tc, nil
}

// closeConn closes the connection from the remote address, and reports whether there was one.
func (l *connListener) closeConn(addr string) bool {
	l.mu.Lock()
	c := l.conns[addr]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	return true
}

type trackedConn struct {
	net.Conn
	l    *connListener
	addr string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		if c.l.conns[c.addr] == c {
			delete(c.l.conns, c.addr)
		}
	})
	return c.Conn.Close()
}
