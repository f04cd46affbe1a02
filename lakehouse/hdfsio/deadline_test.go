package hdfsio_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/lakehouse/hdfsio"
)

// TestSilentNameNodeTimesOut: a NameNode that takes the connection and
// never answers (stopped, wedged) fails the call after hdfs.io-timeout,
// naming its address: colinmarc/hdfs sets no deadline on NameNode calls,
// and hdfs.dial-timeout bounds only the connect, so the caller — a flush,
// a scheduled run, a stop — waited for ever.
func TestSilentNameNodeTimesOut(t *testing.T) {
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
	done := make(chan error, 1)
	go func() {
		_, err := hdfsio.Load(l.Addr().String(), map[string]string{hdfsio.PropUser: "floe", hdfsio.PropIOTimeout: "500ms"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "NameNode "+l.Addr().String()) {
			t.Fatalf("Load of a silent NameNode: %v; want an error naming it", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Load of a silent NameNode still waiting after 20 s")
	}
}
