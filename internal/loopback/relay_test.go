package loopback

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer echoes every line it receives until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends a line over c and reads it back.
func roundTrip(c net.Conn, line string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func TestRelayCutAndRestore(t *testing.T) {
	r, err := StartRelay(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	before := dial()
	if err := roundTrip(before, "hello"); err != nil {
		t.Fatalf("through the relay: %v", err)
	}

	r.Cut()
	if err := roundTrip(before, "still there?"); err == nil {
		t.Fatal("a connection survived the cut")
	}
	if c, err := net.Dial("tcp", r.Addr); err == nil {
		defer func() { _ = c.Close() }()
		if err := roundTrip(c, "new"); err == nil {
			t.Fatal("a new connection went through a cut link")
		}
	}

	r.Restore()
	if err := roundTrip(dial(), "back"); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
}

func TestRelayPartition(t *testing.T) {
	r, err := StartRelay(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	silent := func(c net.Conn, what string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatalf("%s: the write failed (%v): a partition tells nobody", what, err)
		}
		if n, err := c.Read(make([]byte, 16)); n > 0 || !isTimeout(err) {
			t.Fatalf("%s: read %d bytes, %v; want silence", what, n, err)
		}
	}
	before := dial()
	if err := roundTrip(before, "hello"); err != nil {
		t.Fatalf("through the relay: %v", err)
	}
	r.Partition()
	silent(before, "a connection during the partition")
	silent(dial(), "a new connection during the partition")
	r.Restore()
	silent(before, "a connection lost in the partition, after it")
	if err := roundTrip(dial(), "back"); err != nil {
		t.Fatalf("a new connection after the partition: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestRelayStall: a stall holds the bytes of a connection, and delivers them when it ends; a relay closed
// during a stall does not wait for its end.
func TestRelayStall(t *testing.T) {
	r, err := StartRelay(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if err := roundTrip(c, "hello"); err != nil {
		t.Fatalf("through the relay: %v", err)
	}
	r.Stall()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatalf("a write during the stall: %v", err)
	}
	if n, err := c.Read(make([]byte, 16)); n > 0 || !isTimeout(err) {
		t.Fatalf("read %d bytes during the stall, %v; want nothing yet", n, err)
	}
	r.Restore()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "held\n" {
		t.Fatalf("after the stall: %q, %v; want the held line", got, err)
	}

	r.Stall()
	if _, err := c.Write([]byte("never\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the stall to end")
	}
}
