package pipeline

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/pipeline/embedded"
)

// TestTooLargeDeadLetterIsWritten: the dead letter of a record over
// max_message_bytes (1 MiB by default) would be as large, and the writer
// refused it at every attempt, holding the flush forever; it is written
// with the value's first bytes and its size, beside a small letter kept
// whole, and read back from a real broker.
func TestTooLargeDeadLetterIsWritten(t *testing.T) {
	cl, err := embedded.StartTopic(t.Context(), "clicks.dlq", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := newDeadLetterWriter(KafkaConfig{Brokers: cl.Addrs(), DLQTopic: "clicks.dlq"}, "t.clicks", &kafka.Transport{})
	defer w.close()
	big := bytes.Repeat([]byte("0123456789abcdef"), (2<<20)/16) // 2 MiB
	small := []byte(`{"event_id":`)
	letters := []deadLetter{
		{msg: kafka.Message{Topic: "clicks", Offset: 7, Key: []byte("s-1"), Value: big, Time: time.Now()}, reason: "too_large",
			detail: "message is 2097152 bytes; the limit is 1048576"},
		{msg: kafka.Message{Topic: "clicks", Offset: 8, Key: []byte("s-2"), Value: small, Time: time.Now()}, reason: "malformed_json"},
	}
	if err := w.write(t.Context(), letters); err != nil {
		t.Fatalf("writing: %v", err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: cl.Addrs(), Topic: "clicks.dlq", Partition: 0, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	header := func(m kafka.Message, key string) (string, bool) {
		for _, h := range m.Headers {
			if h.Key == key {
				return string(h.Value), true
			}
		}
		return "", false
	}
	for i, want := range letters {
		m, err := r.ReadMessage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if off, _ := header(m, HeaderSourceOffset); off != strconv.FormatInt(want.msg.Offset, 10) || string(m.Key) != string(want.msg.Key) {
			t.Fatalf("letter %d: source offset %q, key %q", i, off, m.Key)
		}
		size, cut := header(m, HeaderValueSize)
		switch {
		case i == 0 && (!cut || size != "2097152" || len(m.Value)+len(m.Key) != maxLetterBytes || !bytes.HasPrefix(big, m.Value)):
			t.Fatalf("too large letter: %d bytes of value, %s %q: want its first %d bytes and size 2097152",
				len(m.Value), HeaderValueSize, size, maxLetterBytes-len(m.Key))
		case i == 1 && (cut || !bytes.Equal(m.Value, small)):
			t.Fatalf("small letter: value %q, %s %q: want it whole, without the header", m.Value, HeaderValueSize, size)
		}
	}
}
