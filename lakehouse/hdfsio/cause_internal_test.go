package hdfsio

import (
	"errors"
	"io/fs"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/colinmarc/hdfs/v2"
)

// resetting listens on loopback and resets every connection once the
// client has sent what it sends first (for a NameNode: the handshake and
// the first call) and gone quiet.
func resetting(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			for {
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			c.(*net.TCPConn).SetLinger(0) // Close sends RST
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestNamenodeResetGetsNoDataTransferHint: under Kerberos without
// hdfs.data-transfer-protection, a connection a NameNode resets (a restart,
// a failover) is not put down to a DataNode wanting SASL; one another node
// resets still gets the hint, worded as a possibility. Every reset or EOF
// was said to be "a DataNode dropped the connection", a NameNode's too.
func TestNamenodeResetGetsNoDataTransferHint(t *testing.T) {
	dial := deadlineDialer((&net.Dialer{}).DialContext, 0)
	namenodes := &addrSet{}
	f := &FS{user: "floe", noDataProtection: true, namenodes: namenodes}

	nn := resetting(t)
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{nn}, User: "floe", NamenodeDialFunc: namenodes.recording(dial)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Stat("/x")
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Stat on a NameNode that resets the connection: %v; want ECONNRESET", err)
	}
	if err := f.pathError("stat", "hdfs://"+nn+"/x", err); strings.Contains(err.Error(), PropDataTransferProtection) {
		t.Errorf("a NameNode's reset: %v; want no hint about %s", err, PropDataTransferProtection)
	}

	dn := resetting(t)
	conn, err := dial(t.Context(), "tcp", dn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("block op")); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading from a DataNode that resets the connection: %v; want ECONNRESET", err)
	}
	err = f.pathError("create", "hdfs://"+nn+"/x", &fs.PathError{Op: "create", Path: "/x", Err: err})
	if msg := err.Error(); !strings.Contains(msg, "if a DataNode dropped the connection") || !strings.Contains(msg, PropDataTransferProtection) {
		t.Errorf("another node's reset: %v; want the hint about %s, worded as a possibility", err, PropDataTransferProtection)
	}
}
