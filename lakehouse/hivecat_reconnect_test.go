package lakehouse_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"

	"github.com/floe-dev/floe/lakehouse"
)

// restartProxy forwards TCP to target; restart() drops every connection, as
// a metastore that restarts (or fails over behind a VIP) does.
type restartProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted atomic.Int64
}

func newRestartProxy(t *testing.T, target string) *restartProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &restartProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.restart() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *restartProxy) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestHiveCatalogReconnects: after the metastore drops its connections (a
// restart, a failover behind a virtual IP), the Hive catalog floe opened
// once for the life of `floe run` reconnects: a call fails, the next
// succeeds. iceberg-go's Hive catalog dials one Thrift connection when it
// is opened and never again: every call failed for as long as floe ran,
// the metastore back or not.
func TestHiveCatalogReconnects(t *testing.T) {
	uri, _ := startMetastore(t)
	p := newRestartProxy(t, strings.TrimPrefix(uri, "thrift://"))
	cat, err := lakehouse.OpenCatalog(t.Context(), map[string]string{"type": "hive", "uri": "thrift://" + p.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	check := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		ok, err := cat.CheckTableExists(ctx, catalog.ToIdentifier("db", "iceberg"))
		if err == nil && !ok {
			t.Fatal("db.iceberg does not exist")
		}
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	p.restart() // the metastore restarts; it accepts connections again at once
	var last error
	for range 3 {
		if last = check(); last == nil {
			if n := p.accepted.Load(); n != 2 {
				t.Errorf("%d connections to the metastore, want 2", n)
			}
			return
		}
	}
	t.Fatalf("3 calls after a metastore restart all failed (last: %v); connections: %d", last, p.accepted.Load())
}
