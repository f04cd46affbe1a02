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
	addr := silentNameNode(t)
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

// TestSilentNameNodeTimesOut: a NameNode that takes the connection and
// never answers (stopped, wedged) fails the call after hdfs.io-timeout,
// naming its address: colinmarc/hdfs sets no deadline on NameNode calls,
// and hdfs.dial-timeout bounds only the connect, so the caller — a flush,
// a scheduled run, a stop — waited for ever.
func TestSilentNameNodeTimesOut(t *testing.T) {
	addr := silentNameNode(t)
	done := make(chan error, 1)
	go func() {
		_, err := Load(addr, map[string]string{PropUser: "floe", PropIOTimeout: "500ms"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "NameNode "+addr) {
			t.Fatalf("Load of a silent NameNode: %v; want an error naming it", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Load of a silent NameNode still waiting after 20 s")
	}
}

// silentNameNode returns the address of a listener that takes connections
// and never answers, until t ends.
func silentNameNode(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn // open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}
