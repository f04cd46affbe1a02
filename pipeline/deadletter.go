package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// Dead-letter record headers. The source coordinates make a dead-lettered
// record findable and let `floe verify` count each source offset once even if
// an aborted flush wrote it twice.
const (
	HeaderReason          = "floe.reason"
	HeaderField           = "floe.field"
	HeaderDetail          = "floe.detail"
	HeaderSourceTopic     = "floe.source.topic"
	HeaderSourcePartition = "floe.source.partition"
	HeaderSourceOffset    = "floe.source.offset"
	HeaderSourceTimestamp = "floe.source.timestamp"
	// HeaderTable names the table whose route dead-lettered the record:
	// routes of one topic share its dead-letter topic, and each route's
	// verify counts only its own dead letters (and those of the field
	// routes it splits the topic with).
	HeaderTable = "floe.table"
	// HeaderValueSize is the size of the record's value when the dead
	// letter holds only its first bytes (see maxLetterBytes).
	HeaderValueSize = "floe.value.size"
	// HeaderKeySize is the size of the record's key when the dead letter
	// holds only its first maxLetterBytes/2.
	HeaderKeySize = "floe.key.size"
	// HeaderHeadersDropped counts the record's own headers a dead letter
	// left out beyond maxSourceHeaderBytes.
	HeaderHeadersDropped = "floe.source.headers.dropped"
)

// floeHeaders are the headers a dead letter gets from floe. A record's own
// header of one of these names (a dead letter fed back to floe) is left
// out, so that each names one value.
var floeHeaders = []string{HeaderReason, HeaderField, HeaderDetail, HeaderSourceTopic, HeaderSourcePartition,
	HeaderSourceOffset, HeaderSourceTimestamp, HeaderTable, HeaderValueSize, HeaderKeySize, HeaderHeadersDropped}

// maxSourceHeaderBytes bounds the record's own headers that its dead
// letter keeps, after floe's, each counted as its name, its value and
// headerOverhead: with maxLetterBytes of key and value, a letter stays
// below a broker's default 1 MiB message.max.bytes.
const (
	maxSourceHeaderBytes = 64 << 10
	headerOverhead       = 10 // the two lengths' varints, at most
)

// maxReasonTextBytes bounds floe's field and detail headers: a detail may
// quote the record (an enrichment request's URL holds its key), and one
// record's letter too large for the broker held the flush forever.
const maxReasonTextBytes = 1 << 10

// maxLetterBytes bounds a dead letter's key and value together. A record
// dead-lettered as too_large is larger than max_message_bytes (1 MiB by
// default), and so would be its dead letter: the writer (and a broker at
// its default message.max.bytes) would refuse it at every attempt, and the
// flush holding it would retry forever. Such a letter keeps the key's first
// half of the bound at most and the value's first bytes, with the size of
// each one cut (HeaderKeySize, HeaderValueSize); the whole record stays in
// the source topic at the offset the headers give.
const maxLetterBytes = 512 << 10

// deadLetterBatchBytes bounds the dead-letter writer's batches, as kafka-go
// counts them: its estimate leaves out the record batch's 61-byte header,
// so at its default (1 MiB) two letters estimated just under it made a
// batch over a broker's default message.max.bytes (1048588), refused at
// every attempt (the flush holding them retried forever). 4 KiB covers the
// header (the estimate over-counts each record's own framing), and the
// largest letter (maxLetterBytes, maxSourceHeaderBytes and floe's headers,
// under 600 KiB) still fits a batch of its own.
const deadLetterBatchBytes = 1<<20 - 4<<10

// cutLetterBytes bounds what a letter the dead-letter topic refused as too
// large (its max.message.bytes or segment.bytes, or the broker's message.max.bytes, below
// floe's letters) keeps of its record's key and value, and of the record's
// own headers, when written again: written as it was, it was refused at
// every attempt and held its flush forever. floe's headers (under 3 KiB)
// still name the record and the sizes cut; the whole record stays in the
// source topic.
const cutLetterBytes = 4 << 10

// letterBounds bound what a dead letter keeps of its record: data its key
// and value together, headers the record's own headers.
type letterBounds struct{ data, headers int }

var (
	wholeLetter = letterBounds{data: maxLetterBytes, headers: maxSourceHeaderBytes}
	cutLetter   = letterBounds{data: cutLetterBytes, headers: cutLetterBytes}
)

// errDeadLettersRefused marks a dead-letter write the broker refuses in a
// way no retry clears (see refusalsForGood): only a change to the topic's
// ACL or configuration can.
var errDeadLettersRefused = errors.New("dead letters refused for good")

// ReasonEnrichFailed is the dead-letter reason for records the enrichment
// stage could not enrich under the dlq breaker policy. Verify tells it
// from the reasons that do not depend on the moment.
const ReasonEnrichFailed = lakehouse.ReasonEnrichFailed

// deadLetter is a record that cannot become a row, with why.
type deadLetter struct {
	msg    kafka.Message
	reason string
	field  string
	detail string
}

func (d deadLetter) message(topic, table string, b letterBounds) kafka.Message {
	h := []kafka.Header{
		{Key: HeaderReason, Value: []byte(d.reason)},
		{Key: HeaderTable, Value: []byte(table)},
		{Key: HeaderSourceTopic, Value: []byte(d.msg.Topic)},
		{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(d.msg.Partition))},
		{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(d.msg.Offset, 10))},
		{Key: HeaderSourceTimestamp, Value: []byte(d.msg.Time.UTC().Format(time.RFC3339Nano))},
	}
	if d.field != "" {
		h = append(h, kafka.Header{Key: HeaderField, Value: []byte(schemas.Truncate(d.field, maxReasonTextBytes))})
	}
	if d.detail != "" {
		h = append(h, kafka.Header{Key: HeaderDetail, Value: []byte(schemas.Truncate(d.detail, maxReasonTextBytes))})
	}
	key, value := d.msg.Key, d.msg.Value
	if len(key)+len(value) > b.data {
		if len(key) > b.data/2 {
			h = append(h, kafka.Header{Key: HeaderKeySize, Value: []byte(strconv.Itoa(len(key)))})
			key = key[:b.data/2]
		}
		if len(value) > b.data-len(key) {
			h = append(h, kafka.Header{Key: HeaderValueSize, Value: []byte(strconv.Itoa(len(value)))})
			value = value[:b.data-len(key)]
		}
	}
	kept, dropped := 0, 0
	for _, sh := range d.msg.Headers {
		if slices.Contains(floeHeaders, sh.Key) {
			continue
		}
		size := len(sh.Key) + len(sh.Value) + headerOverhead
		if kept+size > b.headers {
			dropped++
			continue
		}
		kept += size
		h = append(h, sh)
	}
	if dropped > 0 {
		h = append(h, kafka.Header{Key: HeaderHeadersDropped, Value: []byte(strconv.Itoa(dropped))})
	}
	return kafka.Message{Topic: topic, Key: key, Value: value, Headers: h}
}

// deadLetterWriter produces dead letters and waits for the broker's
// acknowledgement from all in-sync replicas: a flush may cover a
// dead-lettered offset only after this returns nil.
type deadLetterWriter struct {
	topic string
	table string // named in every dead letter's HeaderTable
	w     *kafka.Writer
	// alone writes the letters the topic refused as too large again, each
	// in a batch of its own (see write).
	alone *kafka.Writer
	// cut, when set, counts the letters written cut.
	cut *atomic.Int64
}

func newDeadLetterWriter(cfg KafkaConfig, table string, transport *kafka.Transport) *deadLetterWriter {
	writer := func(batchSize int) *kafka.Writer {
		return &kafka.Writer{
			Addr:                   kafka.TCP(cfg.Brokers...),
			Balancer:               &kafka.Hash{},
			RequiredAcks:           kafka.RequireAll,
			AllowAutoTopicCreation: true,
			BatchSize:              batchSize,
			BatchBytes:             deadLetterBatchBytes,
			BatchTimeout:           time.Millisecond,
			MaxAttempts:            5,
			Transport:              transport,
		}
	}
	return &deadLetterWriter{topic: cfg.DLQTopic, table: table, w: writer(1000), alone: writer(1)}
}

// write writes letters and returns once all are acknowledged, or with the
// error the letters not acknowledged (pending), which a retry writes: all
// of them again made every outage of one of the topic's partitions write
// the letters the others took once more at each retry. A letter the topic
// refuses as too large is written again alone, and cut (cutLetter) if it
// is refused alone too; an error no retry clears wraps
// errDeadLettersRefused, as does a topic that no longer exists (deleted
// while the job ran, on brokers that do not create topics).
func (d *deadLetterWriter) write(ctx context.Context, letters []deadLetter) (pending []deadLetter, err error) {
	if len(letters) == 0 {
		return nil, nil
	}
	msgs := make([]kafka.Message, len(letters))
	at := make([]int, len(letters)) // the letter of each of msgs
	for i, l := range letters {
		msgs[i], at[i] = l.message(d.topic, d.table, wholeLetter), i
	}
	acked := make([]bool, len(letters))
	err = d.w.WriteMessages(ctx, msgs...)
	acknowledge(acked, at, err)
	// The broker refuses a whole batch over the topic's max.message.bytes
	// (or its segment.bytes: RECORD_LIST_TOO_LARGE), each letter in it as
	// too large: those are written again one by one, whole, and then those
	// refused alone, cut.
	how, cut := "", 0
	for _, b := range []letterBounds{wholeLetter, cutLetter} {
		refused, ok := err.(kafka.WriteErrors)
		if !ok {
			break
		}
		var again []int
		for i, e := range refused {
			if errors.Is(e, kafka.MessageSizeTooLarge) || errors.Is(e, kafka.RecordListTooLarge) {
				again = append(again, at[i])
				refused[i] = nil
			}
		}
		// With other letters refused too, the flush retries them all.
		if err = byError(refused); err != nil || len(again) == 0 {
			break
		}
		msgs, at = make([]kafka.Message, len(again)), again
		for i, l := range again {
			msgs[i] = letters[l].message(d.topic, d.table, b)
		}
		how = fmt.Sprintf("written again one by one, %d of them cut to %d bytes of key and value: ", len(again), cutLetterBytes)
		if b == wholeLetter {
			how = fmt.Sprintf("written again one by one, %d of them: ", len(again))
		}
		err = d.alone.WriteMessages(ctx, msgs...)
		acknowledge(acked, at, err)
		if b == cutLetter {
			// Counted as taken: a retry of the letters still pending
			// does not write these again.
			for _, l := range again {
				if acked[l] {
					cut++
				}
			}
		}
	}
	for i, l := range letters {
		if !acked[i] {
			pending = append(pending, l)
		}
	}
	if d.cut != nil {
		d.cut.Add(int64(cut))
	}
	if err = byError(err); err == nil {
		return nil, nil
	}
	err = fmt.Errorf("writing %d records to dead-letter topic %s: %s%w", len(pending), d.topic, how, err)
	// One letter never written holds its flush forever.
	if slices.ContainsFunc(refusalsForGood, func(code kafka.Error) bool { return errors.Is(err, code) }) {
		return pending, fmt.Errorf("%w: %w", errDeadLettersRefused, err)
	}
	// Gone for good only if it stays gone as long as at start: while a
	// topic is being created, brokers answer so for a moment too.
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		if gone := d.checkTopic(ctx); errors.Is(gone, errNoDeadLetterTopic) {
			return pending, fmt.Errorf("%w: %w", errDeadLettersRefused, gone)
		}
	}
	return pending, err
}

// acknowledge marks in acked the letters (at: the letter of each message
// written) that a write's err says the broker took: all without an error,
// each without its own error for a kafka.WriteErrors (one a message, in
// order), none for an error of the whole write.
func acknowledge(acked []bool, at []int, err error) {
	refused, ok := err.(kafka.WriteErrors)
	for i, l := range at {
		if err == nil || ok && refused[i] == nil {
			acked[l] = true
		}
	}
}

// refusalsForGood are the broker's answers to a produce request that
// retrying cannot change: the topic's ACL, its size limits (a letter
// already cut, see write), a record it can never take (a compacted topic
// refuses one without a key), an invalid topic name.
var refusalsForGood = []kafka.Error{kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed,
	kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidTopic}

// byError returns err, but a kafka.WriteErrors as its distinct errors, each
// with its count of letters (nil when it holds none): it spells out every
// letter's error, and a refused flush of thousands of letters logged as
// many copies of one error at every retry.
func byError(err error) error {
	letters, ok := err.(kafka.WriteErrors)
	if !ok {
		return err
	}
	var distinct []error
	count := map[string]int{}
	for _, e := range letters {
		if e == nil {
			continue
		}
		if count[e.Error()] == 0 {
			distinct = append(distinct, e)
		}
		count[e.Error()]++
	}
	if len(distinct) == 0 {
		return nil
	}
	format := make([]string, len(distinct))
	args := make([]any, 0, 2*len(distinct))
	for i, e := range distinct {
		format[i] = "%d of the letters: %w"
		args = append(args, count[e.Error()], e)
	}
	return fmt.Errorf(strings.Join(format, "; "), args...)
}

// dlqCloseTimeout bounds close. A batch still in flight then was abandoned
// by its flush (a stop past commit.grace), which therefore did not commit:
// its records are read and dead-lettered again by the partition's next
// owner. kafka-go cannot cancel it (each of its 5 attempts has its own
// 10 s timeout), and Writer.Close waits for it: a broker that does not
// answer would hold a stop for almost a minute.
const dlqCloseTimeout = 5 * time.Second

// errNoDeadLetterTopic marks a dead-letter topic that does not exist and
// that the broker does not create when asked (checkTopic).
var errNoDeadLetterTopic = errors.New("does not exist, and the broker did not create it when asked for 10 s " +
	"(auto.create.topics.enable is off, or this principal may not create topics): " +
	"create it, or set kafka.dlq_topic to a topic that exists")

// checkTopicTimeout bounds checkTopic.
const checkTopicTimeout = 30 * time.Second

// checkTopicAgain is how long checkTopic waits before asking again for a
// topic the broker did not know (a variable for tests).
var checkTopicAgain = 500 * time.Millisecond

// checkTopicAsks is how often checkTopic asks for a topic the broker does
// not know before it concludes that the broker does not create it: a
// KRaft broker (every Kafka 4) that creates a topic on request answers
// UNKNOWN_TOPIC_OR_PARTITION while its controller creates it, and so does
// any broker while another client's creation of it is under way.
const checkTopicAsks = 20

// checkTopic asks the broker for the dead-letter topic, letting it create
// the topic as the writer would with its first letter. A topic the broker
// neither has nor creates (asked again for about 10 s), or one this
// principal may not see, would fail the first flush that holds a dead
// letter, and every retry of it, for as long as the member runs: that is
// an error at start-up. Any other answer (a leader being elected, a broker
// out of reach) is left to the writes.
func (d *deadLetterWriter) checkTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTopicTimeout)
	defer cancel()
	for ask := 1; ; ask++ {
		code, err := d.topicCode(ctx)
		switch {
		case err != nil:
			return nil
		case code == kafka.TopicAuthorizationFailed, code == kafka.InvalidTopic:
			return fmt.Errorf("dead-letter topic %s: %w", d.topic, code)
		case code != kafka.UnknownTopicOrPartition:
			return nil
		case ask == checkTopicAsks:
			return fmt.Errorf("dead-letter topic %s %w", d.topic, errNoDeadLetterTopic)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(checkTopicAgain):
		}
	}
}

// CheckDeadLetterTopic makes the start-up check of k's dead-letter topic
// that Member.Run makes (see checkTopic) and CheckReplay, for a command to
// make before it creates a table: a refused start creates none.
func CheckDeadLetterTopic(ctx context.Context, k KafkaConfig) error {
	tr, err := k.transport()
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	return newDeadLetterWriter(k, "", tr).checkTopic(ctx)
}

// topicCode is the broker's answer for the dead-letter topic to a metadata
// request that lets it create the topic: 0 when it has it.
func (d *deadLetterWriter) topicCode(ctx context.Context) (kafka.Error, error) {
	// As long as floe's other requests to a broker that does not answer.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := d.w.Transport.RoundTrip(ctx, d.w.Addr, &metadataAPI.Request{
		TopicNames:             []string{d.topic},
		AllowAutoTopicCreation: true,
	})
	if err != nil {
		return 0, err
	}
	for _, t := range res.(*metadataAPI.Response).Topics {
		if t.Name == d.topic {
			return kafka.Error(t.ErrorCode), nil
		}
	}
	return kafka.UnknownTopicOrPartition, nil
}

// close waits for the writer's batches, at most dlqCloseTimeout; after
// that it returns an error and leaves them to finish or fail in the
// background.
func (d *deadLetterWriter) close() error {
	closed := make(chan struct{})
	go func() { d.w.Close(); d.alone.Close(); close(closed) }()
	select {
	case <-closed:
		return nil
	case <-time.After(dlqCloseTimeout):
		return fmt.Errorf("dead-letter topic %s: an abandoned write still waits for the broker after %s; left behind (its flush did not commit)",
			d.topic, dlqCloseTimeout)
	}
}

// ReadDeadLetters reads the dead-letter topic from its start to its current
// end and returns the source offsets of topic it holds, each with its
// reason (HeaderReason), for reconciliation. A source offset written twice
// (an aborted flush is redone) counts once (see lakehouse.DeadLetters.Add
// for which reason it keeps).
// With tables given, only the dead letters of those tables' routes count
// (HeaderTable), and those without the header (written before it existed);
// without, every dead letter of the topic counts. A read error the reader
// retries is logged to log, as the job's fetches log theirs: it would wait
// without a word until ctx ends (nil: not logged). A topic that does not
// exist holds none.
func ReadDeadLetters(ctx context.Context, k KafkaConfig, log *slog.Logger, tables ...string) (lakehouse.DeadLetters, error) {
	t, err := ReadDeadLetterTopic(ctx, k, log, tables...)
	return t.Letters, err
}

// DeadLetterTopic is what ReadDeadLetterTopic read of a dead-letter topic.
type DeadLetterTopic struct {
	Letters lakehouse.DeadLetters
	// Exists says whether the topic exists. The job's writer has the
	// broker create it with its first dead letter, so a topic that does
	// not exist was never written to; when dead letters were written, they
	// are in another topic (a changed or misspelt kafka.dlq_topic), and
	// verify counts them as gaps.
	Exists bool
	// Trimmed holds the topic's partitions whose log no longer starts at
	// 0, with their log start: retention (or a deletion of records)
	// removed the dead letters below it, whose offsets verify then counts
	// as gaps.
	Trimmed map[int32]int64
}

// ReadDeadLetterTopic is ReadDeadLetters that also says whether the
// dead-letter topic exists and which of its partitions lost letters.
func ReadDeadLetterTopic(ctx context.Context, k KafkaConfig, log *slog.Logger, tables ...string) (t DeadLetterTopic, err error) {
	dialer, err := k.dialer()
	if err != nil {
		return t, err
	}
	// Through the client of every other request (any listed broker
	// answers): it dialed kafka.brokers[0] alone, and with that broker down
	// verify counted every dead letter as a gap.
	dk := k
	dk.Topic = k.DLQTopic
	first, err := FirstOffsets(ctx, dk)
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		return DeadLetterTopic{Letters: lakehouse.DeadLetters{}}, nil
	}
	if err != nil {
		return t, fmt.Errorf("dead-letter topic: %w", err)
	}
	last, err := EndOffsets(ctx, dk)
	if err != nil {
		return t, fmt.Errorf("dead-letter topic: %w", err)
	}
	t = DeadLetterTopic{Letters: lakehouse.DeadLetters{}, Exists: true}
	for _, p := range slices.Sorted(maps.Keys(last)) {
		if first[p] > 0 {
			if t.Trimmed == nil {
				t.Trimmed = map[int32]int64{}
			}
			t.Trimmed[p] = first[p]
		}
		if first[p] >= last[p] {
			continue
		}
		if err := readDeadLetterPartition(ctx, dialer, k, int(p), first[p], last[p], tables, t.Letters, log); err != nil {
			return DeadLetterTopic{}, err
		}
	}
	return t, nil
}

// readDeadLetterPartition reads offsets [first, last) of a partition of the
// dead-letter topic into out.
func readDeadLetterPartition(ctx context.Context, dialer *kafka.Dialer, k KafkaConfig, partition int, first, last int64, tables []string, out lakehouse.DeadLetters, log *slog.Logger) error {
	rk := k
	rk.Topic = k.DLQTopic
	var errLog kafka.Logger
	if log != nil {
		errLog = readErrorLogger(log, rk.Topic, int32(partition))
	}
	r, err := newPausingReader(first, func(seek int64) (*kafka.Reader, error) {
		return openReader(rk, int32(partition), dialer, seek, errLog)
	})
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("reading dead-letter topic %s/%d: %w", k.DLQTopic, partition, err)
		}
		var topic, reason string
		sp, so := int64(-1), int64(-1)
		mine := true
		for _, h := range msg.Headers {
			switch h.Key {
			case HeaderTable:
				mine = len(tables) == 0 || slices.Contains(tables, string(h.Value))
			case HeaderReason:
				reason = string(h.Value)
			case HeaderSourceTopic:
				topic = string(h.Value)
			case HeaderSourcePartition:
				sp, _ = strconv.ParseInt(string(h.Value), 10, 32)
			case HeaderSourceOffset:
				so, _ = strconv.ParseInt(string(h.Value), 10, 64)
			}
		}
		if mine && topic == k.Topic && sp >= 0 && so >= 0 {
			out.Add(int32(sp), so, reason)
		}
		if msg.Offset+1 >= last {
			return nil
		}
	}
}
