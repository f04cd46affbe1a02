package pipeline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/segmentio/kafka-go"
	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/schemas"
)

// WithEnrichment returns sc extended by the configured enrichment columns, so
// the table and every batch carry them as typed Iceberg columns. Without an
// enrich section it returns sc.
func WithEnrichment(sc *schemas.Schema, cfg *enrich.Config) (*schemas.Schema, error) {
	if cfg == nil {
		return sc, nil
	}
	cols := make([]schemas.Column, len(cfg.Fields))
	for i, f := range cfg.Fields {
		t, err := icebergType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("enrich.fields[%d] %s: %w", i, f.Name, err)
		}
		cols[i] = schemas.Column{Name: f.Name, Type: t}
	}
	return sc.WithColumns(cols)
}

func icebergType(t enrich.FieldType) (iceberg.Type, error) {
	switch t {
	case enrich.TypeString:
		return iceberg.PrimitiveTypes.String, nil
	case enrich.TypeLong:
		return iceberg.PrimitiveTypes.Int64, nil
	case enrich.TypeDouble:
		return iceberg.PrimitiveTypes.Float64, nil
	case enrich.TypeBoolean:
		return iceberg.PrimitiveTypes.Bool, nil
	case enrich.TypeTimestamp:
		return iceberg.PrimitiveTypes.TimestampTz, nil
	}
	return nil, fmt.Errorf("unknown type %q", t)
}

// keyExtractor pulls the lookup key out of a record value. It owns a parser,
// so each fetch worker has its own.
type keyExtractor struct {
	field string
	p     fastjson.Parser
}

// key returns the lookup key: a JSON string, or an integer written in
// decimal. A record without one (or not JSON at all) gets "", which the stage
// completes at once as a miss; the decoder then judges the record itself.
func (k *keyExtractor) key(value []byte) string {
	v, err := k.p.ParseBytes(value)
	if err != nil {
		return ""
	}
	f := v.Get(k.field)
	if f == nil {
		return ""
	}
	switch f.Type() {
	case fastjson.TypeString:
		return string(f.GetStringBytes())
	case fastjson.TypeNumber:
		if n, err := f.Int64(); err == nil {
			return strconv.FormatInt(n, 10)
		}
	}
	return ""
}

// laneOverhead is what a record costs in a lane beyond its key and value:
// the kafka.Message, its box and the lane's entry, rounded up.
const laneOverhead = 256

// fetchEnriched is fetch with the enrichment stage between fetching and
// buffering: the fetcher submits records to the partition's lane (blocking
// when the lane is full, which stops fetching), and the drainer buffers them
// in offset order as their lookups complete.
func (m *Member) fetchEnriched(ctx context.Context, b *partitionBuffer, seek int64, win *window, end int64, reached func()) error {
	k := m.cfg.Kafka
	r, err := openReader(k, b.partition, m.dialer, seek)
	if err != nil {
		return err
	}
	defer r.Close()
	lane := m.stage.NewQueue()
	defer lane.Abort() // records still in the lane are redone by the next owner

	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained := make(chan error, 1)
	go func() {
		err := m.drain(ctx, b, lane, win, end, reached)
		cancel() // a failed drainer stops the fetcher
		drained <- err
	}()
	ex := &keyExtractor{field: m.cfg.Enrich.Key}
	for {
		msg, err := r.FetchMessage(ctx)
		if err == nil {
			err = lane.SubmitSized(ctx, ex.key(msg.Value), msg, len(msg.Key)+len(msg.Value)+laneOverhead)
		}
		if err != nil {
			lane.Abort()
			cancel()
			if derr := <-drained; derr != nil || outer.Err() != nil {
				return derr
			}
			return fmt.Errorf("fetching %s/%d: %w", k.Topic, b.partition, err)
		}
	}
}

// drain buffers a lane's completed records in offset order until the lane
// closes or ctx ends.
func (m *Member) drain(ctx context.Context, b *partitionBuffer, lane *enrich.Queue, win *window, end int64, reached func()) error {
	for {
		var c enrich.Completed
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case c, ok = <-lane.Out():
			if !ok {
				return nil
			}
		}
		if err := win.wait(ctx); err != nil {
			return nil
		}
		if err := m.buffer(b, c.Item.(kafka.Message), c.Result, win, end, reached); err != nil {
			return err
		}
	}
}
