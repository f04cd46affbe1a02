package hdfsio

import (
	"context"
	"errors"
	"net"
	"os"
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
		return &deadlineConn{Conn: c, timeout: timeout}, nil
	}
}

type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	c.closeOnTimeout(err)
	return n, err
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	c.closeOnTimeout(err)
	return n, err
}

func (c *deadlineConn) closeOnTimeout(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.Conn.Close()
	}
}
