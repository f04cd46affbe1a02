package hdfsio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// deadlineDialer wraps dial so that every read or write on a connection it
// makes gets at most timeout (0: 2 minutes). colinmarc/hdfs sets no deadline
// on NameNode calls, nor on DataNode streams unless asked, and iceberg-go's
// IO takes no context: a node that takes the connection and never answers
// (stopped, wedged) held the caller — a flush, a scheduled run, a stop —
// for ever. A connection that times out is closed, so that the next call
// dials again instead of reading a late answer to this one.
func deadlineDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &deadlineConn{Conn: c, addr: addr, timeout: timeout}, nil
	}
}

type deadlineConn struct {
	net.Conn
	addr     string // as dialed
	timeout  time.Duration
	timedOut atomic.Bool
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	c.closeOnTimeout(err)
	return n, err
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	c.closeOnTimeout(err)
	return n, err
}

func (c *deadlineConn) closeOnTimeout(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut.Store(true)
		c.Conn.Close()
	}
}

// usable fails the use of a connection closed on a timeout with what
// happened: colinmarc/hdfs keeps a NameNode connection whose call failed
// and tries its next call on it, which reported "use of closed network
// connection" rather than the timeout.
func (c *deadlineConn) usable() error {
	if c.timedOut.Load() {
		return &timedOutError{addr: c.addr, timeout: c.timeout}
	}
	return nil
}

// timedOutError is the use of a connection closed after its node did not
// answer within hdfs.io-timeout. It is os.ErrDeadlineExceeded.
type timedOutError struct {
	addr    string
	timeout time.Duration
}

func (e *timedOutError) Error() string {
	return fmt.Sprintf("%s did not answer within %s %s", e.addr, PropIOTimeout, e.timeout)
}

func (e *timedOutError) Unwrap() error { return os.ErrDeadlineExceeded }
