package hdfsio

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/colinmarc/hdfs/v2"
)

// TestTimedOutNameNodeIsNamedOnTheNextCall: the call after one that timed
// out on a silent NameNode reports the timeout, naming the NameNode and
// hdfs.io-timeout. colinmarc/hdfs tries it on the connection the timeout
// closed, and it failed with "no available namenodes: set tcp ...: use of
// closed network connection".
func TestTimedOutNameNodeIsNamedOnTheNextCall(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	addr := l.Addr().String()
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{addr}, User: "floe",
		NamenodeDialFunc: deadlineDialer((&net.Dialer{}).DialContext, 300*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Stat("/"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Stat on a silent NameNode: %v; want a timeout", err)
	}
	_, err = c.Stat("/")
	want := addr + " did not answer within hdfs.io-timeout 300ms"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("the next Stat: %v; want an error saying %q", err, want)
	}
}
