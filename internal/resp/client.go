package resp

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client is a minimal redis client for reading Argo CD's cache: GET over one connection at a time (requests are
// few and on demand), and SUBSCRIBE over a connection of its own. It speaks RESP2 and redials after any error.
type Client struct {
	// Addr is redis's host:port.
	Addr string
	// Password authenticates with AUTH when not empty.
	Password string
	// Timeout bounds one request (dial included); 5 s when zero.
	Timeout time.Duration

	mu   sync.Mutex
	idle []*conn
}

type conn struct {
	c net.Conn
	r *Reader
}

// maxIdle is how many connections a Client keeps open between requests.
const maxIdle = 4

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 5 * time.Second
}

// Get returns the value of key, and false when the key does not exist.
func (c *Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := c.do(ctx, "GET", key)
	if err != nil {
		return nil, false, err
	}
	if v.Null {
		return nil, false, nil
	}
	if v.Type != '$' {
		return nil, false, fmt.Errorf("redis GET %s: unexpected reply type %q", key, v.Type)
	}
	return bytes.Clone(v.Str), true, nil
}

func (c *Client) do(ctx context.Context, args ...string) (Value, error) {
	cn, err := c.get(ctx)
	if err != nil {
		return Value{}, err
	}
	deadline := time.Now().Add(c.timeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = cn.c.SetDeadline(deadline)
	v, err := cn.roundTrip(args...)
	if err != nil {
		_ = cn.c.Close()
		return Value{}, fmt.Errorf("redis %s at %s: %w", args[0], c.Addr, err)
	}
	if err := v.Err(); err != nil {
		c.put(cn)
		return Value{}, fmt.Errorf("redis %s at %s: %w", args[0], c.Addr, err)
	}
	c.put(cn)
	return v, nil
}

func (cn *conn) roundTrip(args ...string) (Value, error) {
	if _, err := cn.c.Write(AppendCommand(nil, args...)); err != nil {
		return Value{}, err
	}
	return cn.r.ReadValue()
}

func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	return c.dial(ctx)
}

func (c *Client) put(cn *conn) {
	_ = cn.c.SetDeadline(time.Time{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) < maxIdle {
		c.idle = append(c.idle, cn)
		return
	}
	_ = cn.c.Close()
}

func (c *Client) dial(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial redis %s: %w", c.Addr, err)
	}
	cn := &conn{c: nc, r: NewReader(nc)}
	if c.Password != "" {
		_ = nc.SetDeadline(time.Now().Add(c.timeout()))
		v, err := cn.roundTrip("AUTH", c.Password)
		if err == nil {
			err = v.Err()
		}
		if err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("redis AUTH at %s: %w", c.Addr, err)
		}
	}
	return cn, nil
}

// Close closes the idle connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.idle {
		_ = cn.c.Close()
	}
	c.idle = nil
}

// Subscribe subscribes to channel on a connection of its own and calls onMessage for every message published
// to it, until ctx ends or the connection fails. It returns once subscribed (or failing that), and done is
// closed when the subscription ends, with the error that ended it.
func (c *Client) Subscribe(ctx context.Context, channel string, onMessage func(payload []byte)) (done <-chan error, err error) {
	cn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	_ = cn.c.SetDeadline(time.Now().Add(c.timeout()))
	v, err := cn.roundTrip("SUBSCRIBE", channel)
	if err == nil {
		err = v.Err()
	}
	if err == nil && (len(v.Elems) < 1 || string(v.Elems[0].Str) != "subscribe") {
		err = fmt.Errorf("unexpected reply %q", v.Type)
	}
	if err != nil {
		_ = cn.c.Close()
		return nil, fmt.Errorf("redis SUBSCRIBE %s at %s: %w", channel, c.Addr, err)
	}
	_ = cn.c.SetDeadline(time.Time{})
	ended := make(chan error, 1)
	stop := context.AfterFunc(ctx, func() { _ = cn.c.Close() })
	go func() {
		defer stop()
		defer func() { _ = cn.c.Close() }()
		for {
			v, err := cn.r.ReadValue()
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				ended <- err
				return
			}
			if len(v.Elems) == 3 && string(v.Elems[0].Str) == "message" {
				onMessage(v.Elems[2].Str)
			}
		}
	}()
	return ended, nil
}
