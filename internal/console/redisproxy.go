package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/resp"
)

// RedisProxy stands in front of the hub's redis for argocd-server (its --redis address). It passes every command
// through to the hub's redis unchanged, except the reads of pulled Applications' cache entries — GET of their
// tree and managed resources, GET of a managed cluster's info, SUBSCRIBE to their tree-changed channel — which the
// Console answers from the clusters. It speaks RESP2 and RESP3 (argocd-server's go-redis uses RESP3).
type RedisProxy struct {
	// Console answers the pulled Applications' entries.
	Console *Console
	// Upstream is the hub's redis address.
	Upstream string
}

// Serve accepts connections on l until it is closed or ctx ends.
func (p *RedisProxy) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("redis proxy: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := &redisConn{p: p, client: c, in: resp.NewReader(c), proto: 2, local: map[string]*Subscription{}}
			conn.serve(ctx)
		}()
	}
}

// redisConn is one client connection and, once needed, its connection to the hub's redis.
type redisConn struct {
	p      *RedisProxy
	client net.Conn
	in     *resp.Reader
	// proto is the protocol the client negotiated with HELLO (2 until then).
	proto int
	// multi is set between MULTI and EXEC/DISCARD: everything goes upstream, in order.
	multi bool

	upstream net.Conn
	upIn     *resp.Reader
	// pubsub is set once a subscription went upstream: from then on the hub's redis may push at any time, and its
	// replies are passed on by a goroutine of their own.
	pubsub bool

	writeMu sync.Mutex
	// local are the subscriptions the Console answers, by channel.
	local map[string]*Subscription
	mu    sync.Mutex
}

func (c *redisConn) serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = c.client.Close() })
	defer stop()
	defer c.close()
	logger := klog.FromContext(ctx).WithValues("client", c.client.RemoteAddr().String())
	for {
		args, raw, err := c.in.ReadCommand()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				logger.V(2).Info("Redis proxy connection ended", "err", err)
			}
			return
		}
		if err := c.command(ctx, args, raw); err != nil {
			logger.V(2).Info("Redis proxy connection failed", "err", err)
			return
		}
	}
}

func (c *redisConn) close() {
	c.mu.Lock()
	local := c.local
	c.local = map[string]*Subscription{}
	c.mu.Unlock()
	for _, s := range local {
		s.Close()
	}
	if c.upstream != nil {
		_ = c.upstream.Close()
	}
}

// command answers one command, or passes it through.
func (c *redisConn) command(ctx context.Context, args [][]byte, raw []byte) error {
	name := strings.ToUpper(string(args[0]))
	switch {
	case c.multi:
		if name == "EXEC" || name == "DISCARD" {
			c.multi = false
		}
	case name == "MULTI":
		c.multi = true
	case name == "HELLO" && len(args) > 1:
		if string(args[1]) == "3" {
			c.proto = 3
		} else if string(args[1]) == "2" {
			c.proto = 2
		}
	case name == "GET" && len(args) == 2:
		value, found, handled, err := c.p.Console.Entry(ctx, string(args[1]))
		if handled {
			return c.answerGet(value, found, err)
		}
	case name == "SUBSCRIBE" && len(args) > 1:
		return c.subscribe(ctx, args[1:], raw)
	case name == "UNSUBSCRIBE":
		return c.unsubscribe(args[1:], raw)
	}
	return c.forward(raw)
}

func (c *redisConn) answerGet(value []byte, found bool, err error) error {
	switch {
	case err != nil:
		return c.write(resp.AppendError(nil, "ERR argocd-pull console: "+err.Error()))
	case !found:
		return c.write(resp.AppendNull(nil, c.proto))
	}
	return c.write(resp.AppendBulk(nil, value))
}

// subscribe subscribes to the channels the Console answers itself and passes the others through.
func (c *redisConn) subscribe(ctx context.Context, channels [][]byte, raw []byte) error {
	var rest []string
	for _, ch := range channels {
		channel := string(ch)
		c.mu.Lock()
		_, dup := c.local[channel]
		c.mu.Unlock()
		if dup {
			if err := c.write(resp.AppendPush(nil, c.proto, "subscribe", channel, c.count())); err != nil {
				return err
			}
			continue
		}
		sub, handled, err := c.p.Console.Subscribe(ctx, channel, func() {
			_ = c.write(resp.AppendPush(nil, c.proto, "message", channel, ""))
		})
		if !handled {
			rest = append(rest, channel)
			continue
		}
		if err != nil {
			// A subscription that cannot be made still gets its confirmation, so that argocd-server's client goes on;
			// the UI then shows the tree it reads with GET, without live updates.
			klog.FromContext(ctx).Info("Cannot subscribe on the managed cluster; no live tree updates", "channel", channel, "err", err)
		} else {
			c.mu.Lock()
			c.local[channel] = sub
			c.mu.Unlock()
		}
		if err := c.write(resp.AppendPush(nil, c.proto, "subscribe", channel, c.count())); err != nil {
			return err
		}
	}
	if len(rest) == 0 {
		return nil
	}
	if len(rest) < len(channels) {
		raw = resp.AppendCommand(nil, append([]string{"SUBSCRIBE"}, rest...)...)
	}
	if err := c.startPubSub(); err != nil {
		return err
	}
	return c.forward(raw)
}

// unsubscribe ends the Console's subscriptions named (all without names) and passes the command on when other
// subscriptions are upstream.
func (c *redisConn) unsubscribe(channels [][]byte, raw []byte) error {
	c.mu.Lock()
	var ended []string
	if len(channels) == 0 {
		for ch := range c.local {
			ended = append(ended, ch)
		}
	} else {
		var rest []string
		for _, ch := range channels {
			if _, ok := c.local[string(ch)]; ok {
				ended = append(ended, string(ch))
			} else {
				rest = append(rest, string(ch))
			}
		}
		raw = nil
		if len(rest) > 0 {
			raw = resp.AppendCommand(nil, append([]string{"UNSUBSCRIBE"}, rest...)...)
		}
	}
	for _, ch := range ended {
		c.local[ch].Close()
		delete(c.local, ch)
	}
	c.mu.Unlock()
	for _, ch := range ended {
		if err := c.write(resp.AppendPush(nil, c.proto, "unsubscribe", ch, c.count())); err != nil {
			return err
		}
	}
	if raw == nil || (!c.pubsub && len(ended) > 0) {
		return nil
	}
	return c.forward(raw)
}

// count is the number of the Console's subscriptions on this connection.
func (c *redisConn) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.local))
}

// forward sends a command to the hub's redis. Before any subscription went upstream it waits for the one
// reply and passes it on; afterwards replies are passed on as they come.
func (c *redisConn) forward(raw []byte) error {
	if err := c.dialUpstream(); err != nil {
		return c.write(resp.AppendError(nil, "ERR argocd-pull console: "+err.Error()))
	}
	if _, err := c.upstream.Write(raw); err != nil {
		return fmt.Errorf("write to the hub's redis: %w", err)
	}
	if c.pubsub {
		return nil
	}
	reply, err := c.upIn.ReadReply()
	if err != nil {
		return fmt.Errorf("read from the hub's redis: %w", err)
	}
	return c.write(reply)
}

func (c *redisConn) dialUpstream() error {
	if c.upstream != nil {
		return nil
	}
	u, err := net.DialTimeout("tcp", c.p.Upstream, 10*time.Second)
	if err != nil {
		return fmt.Errorf("dial the hub's redis %s: %w", c.p.Upstream, err)
	}
	c.upstream, c.upIn = u, resp.NewReader(u)
	return nil
}

// startPubSub passes the hub's redis replies on as they come, from the first subscription that goes upstream.
func (c *redisConn) startPubSub() error {
	if c.pubsub {
		return nil
	}
	if err := c.dialUpstream(); err != nil {
		return c.write(resp.AppendError(nil, "ERR argocd-pull console: "+err.Error()))
	}
	c.pubsub = true
	go func() {
		for {
			reply, err := c.upIn.ReadReply()
			if err != nil {
				_ = c.client.Close()
				return
			}
			if c.write(reply) != nil {
				return
			}
		}
	}()
	return nil
}

// write writes whole replies to the client; pushes of the Console's subscriptions come from other goroutines.
func (c *redisConn) write(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.client.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := c.client.Write(b)
	return err
}
