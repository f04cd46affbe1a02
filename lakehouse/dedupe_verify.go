package lakehouse

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// keyIndex is what Verify keeps of the business keys: where and when each
// key was first seen, and every copy of the keys seen more than once. Its
// cost is about that of the session index: one map entry per distinct key,
// plus one per repeated row.
type keyIndex struct {
	column string
	// timeColumn is the event-time column when the MERGE searches within
	// window of it ("" for an unbounded search).
	timeColumn string
	window     int64 // microseconds
	first      map[string]keyCopy
	// repeats holds every copy of each key seen more than once.
	repeats map[string][]keyCopy

	// Filled by finish: copies the MERGE should have skipped (within the
	// window of another copy), keys whose copies lie only farther apart,
	// and the copies of a few duplicated keys.
	dups, beyond int64
	copies       map[string][]coord
}

// keyCopy is one row holding a key: where, and its event time in
// microseconds (timed false when it has none: the MERGE matches such a
// row with any copy).
type keyCopy struct {
	at coord
	stamp
}

// newKeyIndex returns the index of the business keys t's MERGE dedupes on,
// or nil when it has no dedupe key.
func (t *Table) newKeyIndex() *keyIndex {
	spec := t.dedupe.Load()
	if spec == nil {
		return nil
	}
	k := &keyIndex{column: spec.key, first: map[string]keyCopy{}}
	if spec.window > 0 {
		k.timeColumn, k.window = spec.eventTime, spec.window.Microseconds()
	}
	return k
}

// add indexes the keys of topic's rows in b.
func (k *keyIndex) add(b arrow.RecordBatch, topic string) error {
	col := func(name string) (arrow.Array, error) {
		idx := b.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("scan returned no %s column", name)
		}
		return b.Column(idx[0]), nil
	}
	a, err := col(k.column)
	if err != nil {
		return err
	}
	key, err := keyReader(a)
	if err != nil {
		return fmt.Errorf("dedupe key %s: %w", k.column, err)
	}
	var (
		topics stringColumn
		parts  *array.Int32
		offs   *array.Int64
		times  *array.Timestamp
		unit   arrow.TimeUnit
		ok     bool
	)
	if a, err = col(TopicColumn); err != nil {
		return err
	}
	if topics, ok = a.(stringColumn); !ok {
		return fmt.Errorf("column %s is %s, not the type floe writes", TopicColumn, a.DataType())
	}
	if a, err = col(PartitionColumn); err != nil {
		return err
	}
	if parts, ok = a.(*array.Int32); !ok {
		return fmt.Errorf("column %s is %s, not the type floe writes", PartitionColumn, a.DataType())
	}
	if a, err = col(OffsetColumn); err != nil {
		return err
	}
	if offs, ok = a.(*array.Int64); !ok {
		return fmt.Errorf("column %s is %s, not the type floe writes", OffsetColumn, a.DataType())
	}
	if k.timeColumn != "" {
		if a, err = col(k.timeColumn); err != nil {
			return err
		}
		if times, ok = a.(*array.Timestamp); !ok {
			return fmt.Errorf("event-time column %s is %s, not a timestamp", k.timeColumn, a.DataType())
		}
		unit = a.DataType().(*arrow.TimestampType).Unit
	}
	for i := range int(b.NumRows()) {
		if topics.IsNull(i) || topics.Value(i) != topic || parts.IsNull(i) || offs.IsNull(i) {
			continue
		}
		v, ok := key(i)
		if !ok {
			continue
		}
		c := keyCopy{at: coord{topic: topic, partition: parts.Value(i), offset: offs.Value(i)}}
		if times != nil {
			c.stamp = stampOf(times, unit, i)
		}
		first, seen := k.first[v]
		if !seen {
			k.first[strings.Clone(v)] = c
			continue
		}
		// A row stored twice at one offset is a duplicate id, counted as
		// such: not a second business key too.
		if first.at == c.at {
			continue
		}
		if cs, ok := k.repeats[v]; ok {
			if slices.ContainsFunc(cs, func(o keyCopy) bool { return o.at == c.at }) {
				continue
			}
			k.repeats[v] = append(cs, c)
			continue
		}
		if k.repeats == nil {
			k.repeats = map[string][]keyCopy{}
		}
		k.repeats[strings.Clone(v)] = []keyCopy{first, c}
	}
	return nil
}

// finish counts the duplicates among the repeated keys. The MERGE searches
// the table within the window of a flush's event times, so a copy is a
// duplicate it should have skipped when, in event-time order, it lies
// within the window of the copy before it (or either has no event time);
// a key whose copies all lie farther apart is only repeated beyond the
// window, which a bounded search deliberately allows.
func (k *keyIndex) finish() {
	var dup []string
	for v, cs := range k.repeats {
		slices.SortFunc(cs, func(a, b keyCopy) int {
			return cmp.Or(cmp.Compare(a.us, b.us), cmp.Compare(a.at.partition, b.at.partition), cmp.Compare(a.at.offset, b.at.offset))
		})
		dups := int64(0)
		for i := 1; i < len(cs); i++ {
			// The MERGE's own rule (window 0 without a time column).
			if cs[i].near(cs[i-1].stamp, k.window) {
				dups++
			}
		}
		if dups == 0 {
			k.beyond++
			continue
		}
		k.dups += dups
		dup = append(dup, v)
	}
	// The examples are the first keys in sort order, whatever the order the
	// files were read in.
	slices.Sort(dup)
	k.copies = map[string][]coord{}
	for _, v := range dup[:min(len(dup), maxExamples)] {
		for _, c := range k.repeats[v] {
			k.copies[v] = append(k.copies[v], c.at)
		}
	}
}

// examples renders the duplicated keys kept, sorted, each with its copies
// in (partition, offset) order.
func (k *keyIndex) examples() []string {
	out := []string{}
	for v, cs := range k.copies {
		slices.SortFunc(cs, func(a, b coord) int {
			return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
		})
		at := make([]string, len(cs))
		for i, c := range cs {
			at[i] = c.String()
		}
		out = append(out, fmt.Sprintf("%s (%s)", v, strings.Join(at, ", ")))
	}
	slices.Sort(out)
	return out
}

// KeyCheck is the business-key check of one table of a RoutesReport: the
// fields of Report of the same names.
type KeyCheck struct {
	DedupeKey            string   `json:"dedupe_key"`
	DistinctKeys         int64    `json:"distinct_keys"`
	DuplicateKeys        int64    `json:"duplicate_keys"`
	KeysBeyondWindow     int64    `json:"keys_repeated_beyond_window"`
	DuplicateKeyExamples []string `json:"duplicate_key_examples"`
}

// check finishes k and returns its outcome (nil for a nil k).
func (k *keyIndex) check() *KeyCheck {
	if k == nil {
		return nil
	}
	k.finish()
	return &KeyCheck{DedupeKey: k.column, DistinctKeys: int64(len(k.first)), DuplicateKeys: k.dups,
		KeysBeyondWindow: k.beyond, DuplicateKeyExamples: k.examples()}
}

// problem describes the duplicates found, or is "" when there are none
// (or c is nil).
func (c *KeyCheck) problem() string {
	if c == nil || c.DuplicateKeys == 0 {
		return ""
	}
	return fmt.Sprintf("%s (same %s, other offset): %s", plural(c.DuplicateKeys, "duplicate business key"), c.DedupeKey,
		strings.Join(c.DuplicateKeyExamples, ", "))
}
