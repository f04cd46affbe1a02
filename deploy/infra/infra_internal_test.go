package infra

import "testing"

// The failures of a start script whose drawn port another process took, as
// the services log them, are recognised; other failures are not retried.
func TestPortTaken(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"ERROR [KafkaServer id=1] Fatal error during KafkaServer startup.\norg.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:23456: Address already in use.", true},
		{"ERROR Unable to start acceptor for ListenerName(CONTROLLER)", true},
		{"java.net.BindException: Problem binding to [127.0.0.1:23456] java.net.BindException: Address already in use; For more details see:  http://wiki.apache.org/hadoop/BindException", true},
		{"java.io.IOException: Failed to bind to /127.0.0.1:23456\nCaused by: java.net.BindException: Address already in use", true},
		{"org.apache.hadoop.net.NetUtils: Port in use: 127.0.0.1:23456", true},
		{"hms did not answer within 120s; last lines of /tmp/x/hms.log:\njava.lang.OutOfMemoryError: Java heap space", false},
		{"kafka: cannot download org.apache.kafka:kafka_2.13:3.6.2 from Maven Central", false},
		{"", false},
	} {
		if got := portTaken([]byte(tc.out)); got != tc.want {
			t.Errorf("portTaken(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}
