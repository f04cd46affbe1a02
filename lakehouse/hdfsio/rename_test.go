package hdfsio_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"sync/atomic"
	"testing"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/lakehouse/hdfsio"
)

// stallingProxy forwards TCP connections to target; once armed, a
// connection on which the client sends a request naming method is no
// longer forwarded (the NameNode stays silent for it, as a wedged or
// failing-over one does).
type stallingProxy struct {
	addr   string
	method []byte
	armed  atomic.Bool
	pass   atomic.Int32 // matching requests let through while armed, before one is stalled
}

func newStallingProxy(t *testing.T, target, method string) *stallingProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &stallingProxy{addr: l.Addr().String(), method: []byte(method)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go func() { _, _ = io.Copy(c, s) }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if p.armed.Load() && bytes.Contains(buf[:n], p.method) && p.pass.Add(-1) < 0 {
							_, _ = io.Copy(io.Discard, c) // swallowed, never answered
							return
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestRenameNoReplaceRemovesItsClaimWhenTheRenameFails: RenameNoReplace
// says "If the rename fails the claim is removed". When the rename's RPC got
// no answer within hdfs.io-timeout (a wedged NameNode, a failover), the
// claim's removal was the very next NameNode call, which colinmarc/hdfs,
// having marked the NameNode failed for 5 s, refused at once; the error was
// dropped. The caller got an error, and an empty file stayed at the target:
// for iceberg-go's Hadoop catalog an empty vN.metadata.json, the table's
// newest version, which no load can parse.
func TestRenameNoReplaceRemovesItsClaimWhenTheRenameFails(t *testing.T) {
	h := infra.StartHDFS(t)
	p := newStallingProxy(t, h.NameNode, "rename2")
	fsys, err := hdfsio.Load(p.addr, map[string]string{hdfsio.PropUser: h.User, hdfsio.PropIOTimeout: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	src := "hdfs://" + p.addr + "/t/metadata/v2.metadata.json.claim"
	dst := "hdfs://" + p.addr + "/t/metadata/v2.metadata.json"
	if err := fsys.WriteFile(src, []byte(`{"format-version":2}`)); err != nil {
		t.Fatal(err)
	}
	p.armed.Store(true)
	err = fsys.RenameNoReplace(src, dst)
	p.armed.Store(false)
	if err == nil {
		t.Fatal("RenameNoReplace succeeded through a NameNode that never answered the rename")
	}
	t.Logf("RenameNoReplace: %v", err)
	fi, err := fsys.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		t.Fatal(err)
	default:
		b, _ := fsys.ReadFile(dst)
		t.Fatalf("the rename failed, and %s is left holding %d bytes (%q): the claim was not removed", dst, fi.Size(), b)
	}
	if b, err := fsys.ReadFile(src); err != nil || string(b) != `{"format-version":2}` {
		t.Fatalf("the source after the failed rename: %q, %v", b, err)
	}
}
