package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/pipeline/embedded"
)

// TestTooLargeDeadLetterIsWritten: the dead letter of a record over
// max_message_bytes (1 MiB by default) would be as large, and the writer
// refused it at every attempt, holding the flush forever; it is written
// with the value's first bytes and its size, beside a small letter kept
// whole, and read back from a real broker. So is one whose detail quotes
// a huge key (an enrichment request's URL): its detail is cut.
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
		{msg: kafka.Message{Topic: "clicks", Offset: 9, Key: []byte("s-3"), Value: small, Time: time.Now()}, reason: ReasonEnrichFailed,
			field: "user_id", detail: `Get "http://svc/lookup/` + strings.Repeat("%20", 400_000) + `": timeout`},
	}
	if _, err := w.write(t.Context(), letters); err != nil {
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
		if detail, _ := header(m, HeaderDetail); i == 2 && (len(detail) > maxReasonTextBytes || !strings.HasPrefix(detail, `Get "http://svc/lookup/`)) {
			t.Fatalf("letter of a huge detail: %d bytes of detail, want its first ones, at most %d", len(detail), maxReasonTextBytes)
		}
	}
}

// TestDeadLetterSizesWhatItCuts: a letter over maxLetterBytes of key and
// value keeps the first bytes of each part it cuts and that part's whole
// size in a header (floe.key.size, floe.value.size), and no size header for
// a part kept whole. Before, a key was cut to half the bound with nothing
// saying so, and floe.value.size was added even for a value kept whole.
func TestDeadLetterSizesWhatItCuts(t *testing.T) {
	const half = maxLetterBytes / 2
	for _, c := range []struct {
		name               string
		key, value         int
		keySize, valueSize string // "" when the part is whole
		keptKey, keptValue int
	}{
		{"small", 3, 100, "", "", 3, 100},
		{"large value", 3, 2 << 20, "", "2097152", 3, maxLetterBytes - 3},
		{"large key", 400 << 10, 200 << 10, "409600", "", half, 200 << 10},
		{"both large", 400 << 10, 2 << 20, "409600", "2097152", half, half},
	} {
		msg := kafka.Message{Topic: "clicks", Offset: 3, Key: bytes.Repeat([]byte("k"), c.key), Value: bytes.Repeat([]byte("v"), c.value), Time: time.Now()}
		m := deadLetter{msg: msg, reason: "malformed_json"}.message("clicks.dlq", "t.clicks", wholeLetter)
		sizes := map[string]string{}
		for _, h := range m.Headers {
			if h.Key == HeaderKeySize || h.Key == HeaderValueSize {
				sizes[h.Key] = string(h.Value)
			}
		}
		if len(m.Key) != c.keptKey || len(m.Value) != c.keptValue || sizes[HeaderKeySize] != c.keySize || sizes[HeaderValueSize] != c.valueSize {
			t.Errorf("%s: kept %d bytes of key, %d of value, sizes %v; want %d, %d, %s %q, %s %q", c.name, len(m.Key), len(m.Value), sizes,
				c.keptKey, c.keptValue, HeaderKeySize, c.keySize, HeaderValueSize, c.valueSize)
		}
	}
}

// TestDeadLetterKeepsSourceHeaders: a dead letter carries the record's own
// headers after floe's, except those named like floe's (a dead letter fed
// back to floe), and no more than maxSourceHeaderBytes of them, counting
// those left out.
func TestDeadLetterKeepsSourceHeaders(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxSourceHeaderBytes-64) // with traceparent, 20 bytes short of the bound
	msg := kafka.Message{Topic: "clicks", Partition: 2, Offset: 9, Value: []byte("{"), Time: time.Now(), Headers: []kafka.Header{
		{Key: "traceparent", Value: []byte("00-abc-01")},
		{Key: HeaderReason, Value: []byte("an earlier reason")},
		{Key: "blob", Value: big},
		{Key: "too-much", Value: []byte("0123456789")},
		{Key: "tenant", Value: []byte("t1")},
	}}
	m := deadLetter{msg: msg, reason: "malformed_json"}.message("clicks.dlq", "t.clicks", wholeLetter)
	var names []string
	values := map[string][]string{}
	for _, h := range m.Headers {
		names = append(names, h.Key)
		values[h.Key] = append(values[h.Key], string(h.Value))
	}
	if got := values[HeaderReason]; len(got) != 1 || got[0] != "malformed_json" {
		t.Fatalf("%s: %q, want only malformed_json", HeaderReason, got)
	}
	want := []string{HeaderReason, HeaderTable, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset,
		HeaderSourceTimestamp, "traceparent", "blob", "tenant", HeaderHeadersDropped}
	if !slices.Equal(names, want) {
		t.Fatalf("headers %q, want %q", names, want)
	}
	if values["traceparent"][0] != "00-abc-01" || values["tenant"][0] != "t1" || len(values["blob"][0]) != len(big) {
		t.Fatalf("source headers changed: %q", values)
	}
	if values[HeaderHeadersDropped][0] != "1" {
		t.Fatalf("%s: %q, want 1", HeaderHeadersDropped, values[HeaderHeadersDropped])
	}
}

// kafkaGoSize is what kafka-go's Writer counts a message as when it fills
// a batch up to BatchBytes (its unexported Message.totalSize): fixed
// fields with 4-byte lengths, headers with varint ones. The record batch
// on the wire adds its 61-byte header.
func kafkaGoSize(m kafka.Message) int {
	varint := func(n int) int { return len(binary.AppendVarint(nil, int64(n))) }
	n := 4 + 1 + 1 + 4 + len(m.Key) + 4 + len(m.Value) + 8 + varint(len(m.Headers))
	for _, h := range m.Headers {
		n += varint(len(h.Key)) + len(h.Key) + varint(len(h.Value)) + len(h.Value)
	}
	return n
}

// TestDeadLetterBatchesFitTheBroker: pairs of letters whose sizes, as
// kafka-go counts them, add up to just under 1 MiB (kafka-go's default
// BatchBytes) or just under the writer's bound are written to a broker at
// its default message.max.bytes, and so is the largest letter there can
// be. Before, the writer batched up to kafka-go's default: such a pair made
// one record batch over message.max.bytes once its header was added, the
// broker refused it at every attempt, and the flush holding it retried
// forever.
func TestDeadLetterBatchesFitTheBroker(t *testing.T) {
	cl, err := embedded.StartTopic(t.Context(), "clicks.dlq", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := newDeadLetterWriter(KafkaConfig{Brokers: cl.Addrs(), DLQTopic: "clicks.dlq"}, "t.clicks", &kafka.Transport{})
	defer w.close()
	write := func(what string, letters ...deadLetter) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		if _, err := w.write(ctx, letters); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// The largest letter: key and value at maxLetterBytes, the longest
	// field and detail, maxSourceHeaderBytes of the record's headers.
	var headers []kafka.Header
	for i, n := 0, 0; n+1024+headerOverhead <= maxSourceHeaderBytes; i, n = i+1, n+1024+headerOverhead {
		headers = append(headers, kafka.Header{Key: fmt.Sprintf("h%03d", i), Value: bytes.Repeat([]byte("h"), 1024-4)})
	}
	largest := deadLetter{msg: kafka.Message{Topic: "clicks", Offset: 1, Key: bytes.Repeat([]byte("k"), 1024),
		Value: bytes.Repeat([]byte("v"), 2<<20), Headers: headers, Time: time.Now()}, reason: "too_large",
		field: strings.Repeat("f", 2*maxReasonTextBytes), detail: strings.Repeat("d", 2*maxReasonTextBytes)}
	if n := kafkaGoSize(largest.message("clicks.dlq", "t.clicks", wholeLetter)); n > deadLetterBatchBytes {
		t.Fatalf("the largest letter counts %d bytes, over the batch bound %d", n, deadLetterBatchBytes)
	}
	write("the largest letter", largest)

	// A too_large letter of maxLetterBytes, and a malformed one sized so
	// that the two add up to total.
	big := deadLetter{msg: kafka.Message{Topic: "clicks", Offset: 7, Key: []byte("s-1"), Value: bytes.Repeat([]byte("x"), 2<<20),
		Time: time.Now()}, reason: "too_large", detail: "message is 2097152 bytes; the limit is 1048576"}
	pair := func(total int) []deadLetter {
		mal := deadLetter{msg: kafka.Message{Topic: "clicks", Offset: 8, Key: []byte("s-2"), Value: []byte{}, Time: time.Now()},
			reason: "malformed_json", detail: "cannot parse JSON: unexpected tail"}
		rest := total - kafkaGoSize(big.message("clicks.dlq", "t.clicks", wholeLetter)) - kafkaGoSize(mal.message("clicks.dlq", "t.clicks", wholeLetter))
		mal.msg.Value = bytes.Repeat([]byte("{"), rest)
		return []deadLetter{big, mal}
	}
	for _, limit := range []int{1 << 20, deadLetterBatchBytes} {
		for under := 0; under <= 64; under += 4 {
			write(fmt.Sprintf("two letters of %d bytes", limit-under), pair(limit-under)...)
		}
	}
}

// TestDeadLettersCutAreCountedOnceWritten: of two letters the topic refuses
// whole (over its max.message.bytes), one is written cut and the other's
// cut write fails; the write returns that one as pending and the retry
// writes it. floe_dead_letters_cut_total counts both. Before, a write that
// ended with an error counted none of the letters it had written cut, and
// the retry wrote only the pending one: 1.
func TestDeadLettersCutAreCountedOnceWritten(t *testing.T) {
	cl := dlqBroker(t, 2, map[string]*string{"max.message.bytes": new("20000")})
	// A key for each of the topic's partitions, as the writer's balancer
	// places it.
	var keys [2][]byte
	for i := 0; keys[0] == nil || keys[1] == nil; i++ {
		k := []byte("s-" + strconv.Itoa(i))
		keys[(&kafka.Hash{}).Balance(kafka.Message{Key: k}, 0, 1)] = k
	}
	// Partition 1 refuses the first small batch (a cut letter) for good.
	var refused atomic.Bool
	cl.Kfake().ControlKey(kmsg.Produce.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		if len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 {
			cl.Kfake().KeepControl()
			return nil, nil, false
		}
		p := req.Topics[0].Partitions[0]
		if p.Partition != 1 || len(p.Records) > 10_000 || refused.Swap(true) {
			cl.Kfake().KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = req.Topics[0].Topic
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition, rp.ErrorCode = 1, kerr.PolicyViolation.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})

	w, cut := cuttingWriter(t, cl)
	letters := make([]deadLetter, 2)
	for i, k := range keys {
		letters[i] = deadLetter{msg: kafka.Message{Topic: "clicks", Offset: int64(i), Key: k, Value: bytes.Repeat([]byte("{"), 50_000),
			Time: time.Now()}, reason: "malformed_json"}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	pending, err := w.write(ctx, letters)
	if err == nil || len(pending) != 1 || !bytes.Equal(pending[0].msg.Key, keys[1]) {
		t.Fatalf("first write: %d pending, error %v; want partition 1's letter pending, refused", len(pending), err)
	}
	if pending, err = w.write(ctx, pending); err != nil || len(pending) != 0 {
		t.Fatalf("retry: %d pending, error %v", len(pending), err)
	}
	if n := cut.Load(); n != 2 {
		t.Errorf("floe_dead_letters_cut_total %d, want 2: both letters were written cut", n)
	}
}

// dlqBroker starts a broker holding clicks.dlq, of partitions and configs.
func dlqBroker(t *testing.T, partitions int32, configs map[string]*string) *embedded.Cluster {
	t.Helper()
	cl, err := embedded.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	if _, err := kadm.NewClient(kc).CreateTopic(t.Context(), partitions, 1, configs, "clicks.dlq"); err != nil {
		t.Fatal(err)
	}
	return cl
}

// cuttingWriter is a dead-letter writer to cl's clicks.dlq counting the
// letters it writes cut.
func cuttingWriter(t *testing.T, cl *embedded.Cluster) (*deadLetterWriter, *atomic.Int64) {
	w := newDeadLetterWriter(KafkaConfig{Brokers: cl.Addrs(), DLQTopic: "clicks.dlq"}, "t.clicks", &kafka.Transport{})
	t.Cleanup(func() { w.close() })
	w.cut = new(atomic.Int64)
	return w, w.cut
}

// TestDeadLetterOverTheSegmentIsWrittenCut: a broker refuses a batch larger
// than the topic's segment.bytes as RECORD_LIST_TOO_LARGE, not as
// MESSAGE_TOO_LARGE; the letter is written cut all the same. Before, that
// answer was final: the flush holding the letter failed for good.
func TestDeadLetterOverTheSegmentIsWrittenCut(t *testing.T) {
	cl := dlqBroker(t, 1, nil)
	// kfake does not check segment.bytes: refuse, as a broker at 10 KB
	// would, every batch over it.
	cl.Kfake().ControlKey(kmsg.Produce.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cl.Kfake().KeepControl()
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				if len(p.Records) <= 10_000 {
					return nil, nil, false
				}
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.RecordListTooLarge.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	w, cut := cuttingWriter(t, cl)
	letter := deadLetter{msg: kafka.Message{Topic: "clicks", Offset: 3, Key: []byte("s-1"), Value: bytes.Repeat([]byte("{"), 50_000),
		Time: time.Now()}, reason: "malformed_json"}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if pending, err := w.write(ctx, []deadLetter{letter}); err != nil || len(pending) != 0 {
		t.Fatalf("%d pending, error %v; want the letter written cut", len(pending), err)
	}
	if n := cut.Load(); n != 1 {
		t.Errorf("floe_dead_letters_cut_total %d, want 1", n)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: cl.Addrs(), Topic: "clicks.dlq", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Key)+len(m.Value) != cutLetterBytes || !bytes.Equal(m.Key, letter.msg.Key) {
		t.Errorf("letter of %d bytes of key and value, key %q: want %d, key %q", len(m.Key)+len(m.Value), m.Key, cutLetterBytes, letter.msg.Key)
	}
}
