package pipeline_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/pipeline"
)

// TestCheckBrokersNamesSilentBrokers: brokers that accept connections but
// never answer (a wrong port of a live host, a stalled proxy) are named
// unreachable, with no answer, once the call's deadline passes, rather than
// holding the caller.
func TestCheckBrokersNamesSilentBrokers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn // open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = pipeline.CheckBrokers(ctx, pipeline.KafkaConfig{Brokers: []string{ln.Addr().String()}, Topic: "clicks"})
	want := "kafka.brokers " + ln.Addr().String() + ": unreachable: no answer: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("CheckBrokers of a silent broker: %v, want it to start %q", err, want)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("CheckBrokers took %v, past its 2 s deadline", took)
	}
}
