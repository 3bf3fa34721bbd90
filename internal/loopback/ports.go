package loopback

import (
	"fmt"
	"net"
	"sync"
)

var (
	portsMu sync.Mutex
	handed  = map[int]bool{}
)

// FreePort returns a loopback TCP port that is free now and was not handed out before by this process.
// Another process may still take it before it is used, so callers that start servers retry on
// "address already in use".
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handed[port] {
			handed[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find free port: no unused port after 100 tries")
}

// FreePorts returns n distinct free ports.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}
