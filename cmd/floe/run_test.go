package main

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestSigtermDuringStartup: a SIGTERM (the command's context cancelled, as
// signal.NotifyContext does) while `floe run` waits on a broker at start-up
// is a stop like one after it: status 0, and 3 ("interrupted before
// catching up") for a scheduled run, where it was status 2 and "context
// canceled".
func TestSigtermDuringStartup(t *testing.T) {
	// A broker that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	for _, tc := range []struct {
		args   []string
		status int
	}{
		{[]string{"run"}, 0},
		{[]string{"run", "--until-caught-up"}, 3},
	} {
		dir := t.TempDir()
		cfg := writeConfig(t, dir, ln.Addr().String(), "floe-test", "analytics.clicks", "", "")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel) // the SIGTERM
		root := rootCmd()
		root.SetArgs(append(tc.args, "--config", cfg, "--log-level", "error"))
		err := root.ExecuteContext(ctx)
		cancel()
		status := 0
		if err != nil {
			status = exitCode(err)
		}
		if status != tc.status {
			t.Errorf("floe %v stopped during start-up: %v, status %d; want status %d", tc.args, err, status, tc.status)
		}
	}
}
