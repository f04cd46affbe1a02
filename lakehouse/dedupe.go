package lakehouse

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/floe-dev/floe/schemas"
)

// DefaultDedupeWindow is how far apart in event time two copies of one
// business key may be found when the configuration does not say: producers
// retry within minutes, redeliveries after a rebalance within hours.
const DefaultDedupeWindow = 7 * 24 * time.Hour

// Dedupe configures the business-key MERGE, the second line of dedupe after
// the always-on (topic, partition, offset) anti-join: a row whose Key is
// already in the table, or earlier in the same flush, within Window of its
// own event time, is skipped. It catches
// what offsets cannot: a producer that retried a send (the same payment at
// two offsets, or in two partitions under different message keys).
type Dedupe struct {
	// Key is the business-key column, a top-level string, int, long or uuid
	// column of the schema; "" turns the business-key MERGE off. A null or
	// empty-string key identifies nothing: such rows are never deduped. An
	// int or long key must be a required column (and, for Protobuf, a
	// field with presence), since an unset number decodes as 0.
	Key string
	// Window bounds the search in event time: a row is skipped only for a
	// copy within Window of its own event time (or a copy or row without
	// one), and only the day partitions and files within [min − Window,
	// max + Window] of the flush's rows are read. A copy farther away is a
	// key reused beyond the window: both are kept. It needs the schema's
	// event-time column. 0 matches every copy and searches every file
	// whose statistics may hold the keys.
	Window time.Duration
}

// SchemaDedupe is the setting a schema declares: its floe.dedupe-key, with
// DefaultDedupeWindow when it has an event-time column (else unbounded).
func SchemaDedupe(sc *schemas.Schema) Dedupe {
	d := Dedupe{Key: sc.DedupeKey}
	if d.Key != "" && sc.EventTime != "" {
		d.Window = DefaultDedupeWindow
	}
	return d
}

// dedupeSpec is a validated Dedupe bound to the table's schema.
type dedupeSpec struct {
	key    string
	typ    iceberg.Type
	window time.Duration
	// eventTime is the event-time column ("" when window is 0);
	// eventOptional means table rows may have none.
	eventTime     string
	eventOptional bool
}

// SetDedupe sets the business-key MERGE of every later Commit (and the
// business-key check of Verify). Open applies the schema's own setting
// (SchemaDedupe); the job's configuration may override it. It returns the
// error CheckDedupe returns.
func (t *Table) SetDedupe(d Dedupe) error {
	spec, err := dedupeSpecOf(t.schema, d)
	if err != nil {
		return err
	}
	t.dedupe.Store(spec)
	return nil
}

// CheckDedupe returns an error naming the key when d does not fit schema
// sc: the key is not a top-level primitive column of a supported type, or
// a window is set without an event-time column. It needs no table, so that
// a job can be refused before its table is created.
func CheckDedupe(sc *schemas.Schema, d Dedupe) error {
	_, err := dedupeSpecOf(sc, d)
	return err
}

// dedupeSpecOf binds d to schema s (nil when d.Key is "": off).
func dedupeSpecOf(s *schemas.Schema, d Dedupe) (*dedupeSpec, error) {
	if d.Key == "" {
		return nil, nil
	}
	sc := s.Iceberg
	f, ok := sc.FindFieldByName(d.Key)
	if !ok || strings.Contains(d.Key, ".") {
		names := make([]string, 0, len(sc.Fields()))
		for _, c := range sc.Fields() {
			names = append(names, c.Name)
		}
		return nil, fmt.Errorf("dedupe key %q: schema %s has no top-level column %q (columns: %s)",
			d.Key, s.Name, d.Key, strings.Join(names, ", "))
	}
	if why := s.AddedColumn(d.Key); why != "" {
		// Many records share its value: the MERGE would keep one row per
		// value and skip the others as duplicates.
		return nil, fmt.Errorf("dedupe key %q: the column is %s, not a field of the record", d.Key, why)
	}
	switch f.Type {
	case iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.UUID:
	case iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int64:
		// An unset number may arrive as 0 (an Avro default, a proto3
		// scalar), and 0 cannot be told from a real key as "" can: only a
		// column every record must set, from a field with presence, is a
		// key.
		if !f.Required {
			return nil, fmt.Errorf("dedupe key %q: column is an optional %s; a numeric key must be a required column (records without one would share the key 0 or null), or use a string key, where \"\" counts as no key", d.Key, f.Type)
		}
		if err := s.CheckKeyPresence(d.Key); err != nil {
			return nil, fmt.Errorf("dedupe key %q: %w", d.Key, err)
		}
	default:
		return nil, fmt.Errorf("dedupe key %q: column is %s; want a string, int, long or uuid column", d.Key, f.Type)
	}
	if d.Window < 0 {
		return nil, fmt.Errorf("dedupe key %q: window %s is negative", d.Key, d.Window)
	}
	spec := &dedupeSpec{key: d.Key, typ: f.Type, window: d.Window}
	if d.Window > 0 {
		if s.EventTime == "" {
			return nil, fmt.Errorf("dedupe key %q: a window (%s) bounds the search in event time, but schema %s declares no event-time column (floe.event-time); set the window to 0 to search by key alone",
				d.Key, d.Window, s.Name)
		}
		ef, _ := sc.FindFieldByName(s.EventTime)
		spec.eventTime, spec.eventOptional = ef.Name, !ef.Required
	}
	return spec, nil
}

// Dedupe returns the business-key setting in force (Key "" when off).
func (t *Table) Dedupe() Dedupe {
	s := t.dedupe.Load()
	if s == nil {
		return Dedupe{}
	}
	return Dedupe{Key: s.key, Window: s.window}
}

// coord is a row's Kafka coordinates, for logs and verify's examples.
type coord struct {
	topic     string
	partition int32
	offset    int64
}

func (c coord) String() string { return fmt.Sprintf("%s/%d@%d", c.topic, c.partition, c.offset) }

// keyStats is what one pass of the business-key MERGE did.
type keyStats struct {
	skipped int64   // rows dropped as business-key duplicates
	at      []coord // their coordinates
	scanned int     // data files read to find existing keys
	pruned  int     // data files of the snapshot the search did not read
}

// keySearch says which of the table's files the business-key MERGE reads.
type keySearch struct {
	// inFlush also drops repeats of a key within the flush itself.
	inFlush bool
	// incremental reads only the files appended after since (all appended
	// files when since is nil): the re-check after a commit conflict.
	incremental bool
	since       *int64
}

// dedupeKeys is the business-key MERGE of one flush: run on the rows the
// offset anti-join kept, it goes through them in (partition, offset) order
// across the parts and drops every row that has a copy within the window
// of its own event time (near): one tbl already holds, or, with inFlush,
// one kept earlier in the flush. Parts' Rows are replaced by their filtered
// copies; changed[i] reports which were. Dropped rows' offsets stay covered
// by their parts' ranges: they are duplicates of rows the table keeps, not
// lost records.
func (t *Table) dedupeKeys(ctx context.Context, tbl *table.Table, spec *dedupeSpec, parts []Part, how keySearch) (st keyStats, changed []bool, err error) {
	debug := t.log.Enabled(ctx, slog.LevelDebug)
	order := make([]int, 0, len(parts))
	for i, p := range parts {
		if p.Rows != nil && p.Rows.NumRows() > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := parts[a].Range, parts[b].Range
		return cmp.Or(cmp.Compare(ra.Topic, rb.Topic), cmp.Compare(ra.Partition, rb.Partition), cmp.Compare(ra.From, rb.From))
	})
	cols := make([]partKeys, len(parts))
	for _, i := range order {
		if cols[i], err = readPartKeys(parts[i].Rows, spec); err != nil {
			return st, nil, fmt.Errorf("business-key MERGE of %s: %w", parts[i].Range, err)
		}
	}
	masks := make([][]bool, len(parts))
	drop := func(i, r int, why string, first coord) {
		if masks[i] == nil {
			masks[i] = make([]bool, parts[i].Rows.NumRows())
			for j := range masks[i] {
				masks[i][j] = true
			}
		}
		masks[i][r] = false
		st.skipped++
		at := coord{parts[i].Range.Topic, parts[i].Range.Partition, cols[i].offs.Value(r)}
		st.at = append(st.at, at)
		if debug {
			k, _ := cols[i].key(r)
			args := []any{"key", spec.key, "value", k, "at", at.String(), "found", why}
			if why == "flush" {
				args = append(args, "first", first.String())
			}
			t.log.Debug("business-key duplicate skipped", args...)
		}
	}

	// The flush's keys, and the span of its rows' event times: every row
	// of a key may be kept, each is searched within the window of its own.
	keys := map[string]struct{}{}
	var span timeSpan
	for _, i := range order {
		pk := cols[i]
		for r := range int(parts[i].Rows.NumRows()) {
			k, ok := pk.key(r)
			if !ok {
				continue // a null or empty key identifies nothing
			}
			if _, seen := keys[k]; !seen {
				keys[strings.Clone(k)] = struct{}{}
			}
			if pk.times != nil {
				span.add(pk.stamp(r))
			}
		}
	}

	// The table's copies of those keys.
	var found map[string][]stamp
	if len(keys) > 0 && (how.incremental || tbl.CurrentSnapshot() != nil) {
		var scanned, pruned int
		found, scanned, pruned, err = searchKeys(ctx, tbl, spec, slices.Collect(maps.Keys(keys)), span, how)
		if err != nil {
			return st, nil, err
		}
		st.scanned, st.pruned = scanned, pruned
	}

	// Each row against the table's copies of its key, then against the
	// flush's rows of the key kept before it.
	w := spec.window.Microseconds()
	var kept map[string][]keyCopy
	if how.inFlush {
		kept = map[string][]keyCopy{}
	}
	if len(found) > 0 || kept != nil {
		for _, i := range order {
			pk := cols[i]
			for r := range int(parts[i].Rows.NumRows()) {
				k, ok := pk.key(r)
				if !ok {
					continue
				}
				var s stamp
				if pk.times != nil {
					s = pk.stamp(r)
				}
				if j := slices.IndexFunc(kept[k], func(c keyCopy) bool { return c.near(s, w) }); j >= 0 {
					drop(i, r, "flush", kept[k][j].at)
					continue
				}
				if slices.ContainsFunc(found[k], func(c stamp) bool { return c.near(s, w) }) {
					drop(i, r, "table", coord{})
					continue
				}
				if kept != nil {
					cs, seen := kept[k]
					if !seen {
						k = strings.Clone(k)
					}
					kept[k] = append(cs, keyCopy{at: coord{parts[i].Range.Topic, parts[i].Range.Partition, pk.offs.Value(r)}, stamp: s})
				}
			}
		}
	}

	changed = make([]bool, len(parts))
	for i, m := range masks {
		if m == nil {
			continue
		}
		out, err := filterRows(ctx, parts[i].Rows, m)
		if err != nil {
			return st, nil, fmt.Errorf("filtering business-key duplicates of %s: %w", parts[i].Range, err)
		}
		parts[i].Rows.Release()
		parts[i].Rows = out
		changed[i] = true
	}
	return st, changed, nil
}

// partKeys reads one part's business keys, offsets and event times.
type partKeys struct {
	key   func(int) (string, bool)
	offs  *array.Int64
	times *array.Timestamp // nil without a window
	unit  arrow.TimeUnit
}

// stamp is row i's event time (p.times must be set).
func (p partKeys) stamp(i int) stamp { return stampOf(p.times, p.unit, i) }

// stampOf is row i's event time in times, of unit unit.
func stampOf(times *array.Timestamp, unit arrow.TimeUnit, i int) stamp {
	if times.IsNull(i) {
		return stamp{}
	}
	return stamp{us: times.Value(i).ToTime(unit).UnixMicro(), timed: true}
}

// stamp is a copy's event time in microseconds; timed is false when it has
// none.
type stamp struct {
	us    int64
	timed bool
}

// near reports whether two copies of a business key are one record to a
// MERGE (and to verify) with window w in microseconds: they lie within w
// of each other in event time, or either has no event time (any copy may
// match it); without a window (w 0) any two copies are. Copies farther
// apart are a key reused beyond the window: both are kept.
func (s stamp) near(o stamp, w int64) bool {
	if w <= 0 || !s.timed || !o.timed {
		return true
	}
	// The gap is at most 2^64-1: unsigned, it cannot wrap (signed, copies
	// near both ends of the long range came out negative, within any
	// window).
	return uint64(max(s.us, o.us)-min(s.us, o.us)) <= uint64(w)
}

// timeSpan is the span of a flush's event times in microseconds: [lo, hi]
// of the rows that have one (timed), and whether a row has none.
type timeSpan struct {
	lo, hi         int64
	timed, untimed bool
}

func (s *timeSpan) add(t stamp) {
	switch {
	case !t.timed:
		s.untimed = true
	case !s.timed:
		s.lo, s.hi, s.timed = t.us, t.us, true
	default:
		s.lo, s.hi = min(s.lo, t.us), max(s.hi, t.us)
	}
}

func readPartKeys(rows arrow.RecordBatch, spec *dedupeSpec) (partKeys, error) {
	var pk partKeys
	col := func(name string) (arrow.Array, error) {
		idx := rows.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("rows have no %s column", name)
		}
		return rows.Column(idx[0]), nil
	}
	a, err := col(spec.key)
	if err != nil {
		return pk, err
	}
	if pk.key, err = keyReader(a); err != nil {
		return pk, fmt.Errorf("dedupe key %s: %w", spec.key, err)
	}
	if a, err = col(OffsetColumn); err != nil {
		return pk, err
	}
	var ok bool
	if pk.offs, ok = a.(*array.Int64); !ok {
		return pk, fmt.Errorf("column %s is %s, not int64", OffsetColumn, a.DataType())
	}
	if spec.eventTime != "" {
		if a, err = col(spec.eventTime); err != nil {
			return pk, err
		}
		if pk.times, ok = a.(*array.Timestamp); !ok {
			return pk, fmt.Errorf("event-time column %s is %s, not a timestamp", spec.eventTime, a.DataType())
		}
		pk.unit = a.DataType().(*arrow.TimestampType).Unit
	}
	return pk, nil
}

// keyReader returns a function giving row i's key in a canonical string
// form (false when null or, for a string column, empty: an unset proto3
// string, or an optional JSON or Avro string given as "", identifies
// nothing). A string key's value points into a's buffers: clone it to keep
// it.
func keyReader(a arrow.Array) (func(int) (string, bool), error) {
	switch c := a.(type) {
	case *extensions.UUIDArray:
		return func(i int) (string, bool) {
			if c.IsNull(i) {
				return "", false
			}
			return c.Value(i).String(), true
		}, nil
	case stringColumn:
		return func(i int) (string, bool) {
			if c.IsNull(i) {
				return "", false
			}
			v := c.Value(i)
			return v, v != ""
		}, nil
	case *array.Int64:
		return func(i int) (string, bool) {
			if c.IsNull(i) {
				return "", false
			}
			return strconv.FormatInt(c.Value(i), 10), true
		}, nil
	case *array.Int32:
		return func(i int) (string, bool) {
			if c.IsNull(i) {
				return "", false
			}
			return strconv.FormatInt(int64(c.Value(i)), 10), true
		}, nil
	}
	return nil, fmt.Errorf("unsupported key type %s", a.DataType())
}

// maxInKeys is the most keys the search names one by one (iceberg-go's own
// limit for pruning an In by column bounds). Beyond it the filter is the
// keys' min and max alone: an In of thousands of values costs more to bind
// and project than it prunes (a large flush's keys fill every bucket
// anyway), and the rows read are matched against the key set regardless.
const maxInKeys = 200

// on returns s for the table's current schema sc: its key column may have
// been widened (int → long) and its event-time column made optional by a
// writer schema since s was set from the schema file, and a search with
// the file's types missed the table's copies (keys cut to 32 bits, rows
// without an event time left out).
func (s *dedupeSpec) on(sc *iceberg.Schema) *dedupeSpec {
	c := *s
	if f, ok := sc.FindFieldByName(s.key); ok {
		c.typ = f.Type
	}
	if f, ok := sc.FindFieldByName(s.eventTime); ok && s.eventTime != "" {
		c.eventOptional = !f.Required
	}
	return &c
}

// keyWidened reports whether the key column had another type in an earlier
// schema of the table (int widened to long): files written before hold its
// bounds in 4 bytes, which iceberg-go v0.7.0 reads as the current type and
// fails ("expected 8 bytes for int64 value, got 4"), so every search, and
// with it every flush, failed until those files were rewritten. Such a
// table's search does not prune by key; the rows read are matched against
// the key set all the same.
func keyWidened(md table.Metadata, key string) bool {
	cur, ok := md.CurrentSchema().FindFieldByName(key)
	if !ok {
		return false
	}
	for _, sc := range md.Schemas() {
		if f, ok := sc.FindFieldByID(cur.ID); ok && !f.Type.Equals(cur.Type) {
			return true
		}
	}
	return false
}

// keyFilter selects rows that may have a key in keys: an In of them, or
// for more than maxInKeys their range (which prunes the files of keys that
// grow with time, such as ULIDs or sequence numbers; uuids get none).
func (s *dedupeSpec) keyFilter(keys []string) (iceberg.BooleanExpression, error) {
	ref := iceberg.Reference(s.key)
	switch s.typ {
	case iceberg.PrimitiveTypes.String:
		return inBetween(ref, keys), nil
	case iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.Int32:
		vals := make([]int64, len(keys))
		for i, k := range keys {
			v, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dedupe key %s: %w", s.key, err)
			}
			vals[i] = v
		}
		if s.typ == iceberg.PrimitiveTypes.Int32 {
			v32 := make([]int32, len(vals))
			for i, v := range vals {
				v32[i] = int32(v)
			}
			return inBetween(ref, v32), nil
		}
		return inBetween(ref, vals), nil
	case iceberg.PrimitiveTypes.UUID:
		if len(keys) > maxInKeys {
			return iceberg.AlwaysTrue{}, nil
		}
		vals := make([]uuid.UUID, len(keys))
		for i, k := range keys {
			u, err := uuid.Parse(k)
			if err != nil {
				return nil, fmt.Errorf("dedupe key %s: %w", s.key, err)
			}
			vals[i] = u
		}
		return iceberg.IsIn(ref, vals...), nil
	}
	return nil, fmt.Errorf("dedupe key %s: unsupported type %s", s.key, s.typ)
}

func inBetween[T interface {
	cmp.Ordered
	iceberg.LiteralType
}](ref iceberg.UnboundTerm, vals []T) iceberg.BooleanExpression {
	if len(vals) <= maxInKeys {
		return iceberg.IsIn(ref, vals...)
	}
	return iceberg.NewAnd(iceberg.GreaterThanEqual(ref, slices.Min(vals)), iceberg.LessThanEqual(ref, slices.Max(vals)))
}

// around returns [lo − window, hi + window], stopped at the int64 limits:
// an event time is any long, and one near a limit wrapped the bound
// around.
func (s *dedupeSpec) around(lo, hi int64) (from, to int64) {
	w := s.window.Microseconds()
	from, to = math.MinInt64, math.MaxInt64
	if lo >= math.MinInt64+w {
		from = lo - w
	}
	if hi <= math.MaxInt64-w {
		to = hi + w
	}
	return from, to
}

// timeFilter selects rows whose event time lies within the window around
// [lo, hi] (microseconds, around: a wrapped bound matched no file, and the
// flush's keys went unsearched), and rows without an event time, which any
// copy may match.
func (s *dedupeSpec) timeFilter(lo, hi int64) iceberg.BooleanExpression {
	ref := iceberg.Reference(s.eventTime)
	from, to := s.around(lo, hi)
	f := iceberg.NewAnd(
		iceberg.GreaterThanEqual(ref, iceberg.Timestamp(from)),
		iceberg.LessThanEqual(ref, iceberg.Timestamp(to)))
	if s.eventOptional {
		f = iceberg.NewOr(f, iceberg.IsNull(ref))
	}
	return f
}

// searchKeys returns the event times of tbl's copies of keys, reading only
// the key and event-time columns of the files whose partition summaries and
// column statistics may hold them (within the window around the flush's
// span when every row of the flush has an event time), and how many data
// files it read and pruned. The window bounds only which files are read:
// each row is then matched with the copies within the window of its own
// event time (near). Of the copies beyond the window of every row of the
// flush it keeps one per key, enough for a row without an event time.
// how.incremental restricts it to the files appended after how.since.
func searchKeys(ctx context.Context, tbl *table.Table, spec *dedupeSpec, keys []string, span timeSpan, how keySearch) (map[string][]stamp, int, int, error) {
	spec = spec.on(tbl.Schema())
	var filter iceberg.BooleanExpression = iceberg.AlwaysTrue{}
	var err error
	if !keyWidened(tbl.Metadata(), spec.key) {
		if filter, err = spec.keyFilter(keys); err != nil {
			return nil, 0, 0, err
		}
	}
	selected := []string{spec.key}
	if spec.window > 0 {
		selected = append(selected, spec.eventTime)
		if span.timed && !span.untimed {
			filter = iceberg.NewAnd(filter, spec.timeFilter(span.lo, span.hi))
		}
	}
	from, to := spec.around(span.lo, span.hi)
	scan := tbl.Scan(table.WithRowFilter(filter), table.WithSelectedFields(withNested(tbl.Schema(), selected, spec.eventTime)...))
	defer scan.Close()
	var tasks []table.FileScanTask
	total := 0
	if how.incremental && !onlyAppendsSince(tbl, how.since) {
		// An overwrite, delete or replace (a Spark MERGE INTO, floe's own
		// compaction or re-enrich) may have added rows an append scan does
		// not see: search the table as the MERGE did.
		how.incremental = false
	}
	if how.incremental {
		inc := tbl.NewIncrementalAppendScan(table.WithRowFilter(filter))
		if how.since != nil {
			inc = inc.FromSnapshotExclusive(*how.since)
		}
		tasks, err = inc.PlanFiles(ctx)
	} else {
		tasks, err = scan.PlanFiles(ctx)
		total = totalDataFiles(tbl.CurrentSnapshot())
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("planning the business-key search: %w", err)
	}
	pruned := max(total-len(tasks), 0)
	found := map[string][]stamp{}
	if len(tasks) == 0 {
		return found, 0, pruned, nil
	}
	want := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		want[k] = struct{}{}
	}
	_, batches, err := scan.ReadTasks(ctx, tasks)
	if err != nil {
		return nil, len(tasks), pruned, fmt.Errorf("reading keys: %w", err)
	}
	for b, err := range batches {
		if err != nil {
			return nil, len(tasks), pruned, fmt.Errorf("reading keys: %w", err)
		}
		read, kerr := keyReader(b.Column(b.Schema().FieldIndices(spec.key)[0]))
		if kerr != nil {
			b.Release()
			return nil, len(tasks), pruned, fmt.Errorf("dedupe key %s: %w", spec.key, kerr)
		}
		var times *array.Timestamp
		var unit arrow.TimeUnit
		if spec.window > 0 {
			idx := b.Schema().FieldIndices(spec.eventTime)
			ok := len(idx) == 1
			if ok {
				times, ok = b.Column(idx[0]).(*array.Timestamp)
			}
			if !ok {
				b.Release()
				return nil, len(tasks), pruned, fmt.Errorf("reading keys: no timestamp column %s", spec.eventTime)
			}
			unit = times.DataType().(*arrow.TimestampType).Unit
		}
		for i := range int(b.NumRows()) {
			// The row filter may only prune files: keep wanted keys.
			k, ok := read(i)
			if !ok {
				continue
			}
			if _, w := want[k]; !w {
				continue
			}
			var s stamp
			if times != nil {
				s = stampOf(times, unit, i)
			}
			cs, seen := found[k]
			// A copy that no row's own window can reach matches only rows
			// without an event time, as any copy of the key does.
			reach := spec.window > 0 && span.timed && (!s.timed || (s.us >= from && s.us <= to))
			if seen && !reach {
				continue
			}
			if !seen {
				k = strings.Clone(k)
			}
			found[k] = append(cs, s)
		}
		b.Release()
	}
	return found, len(tasks), pruned, nil
}

// onlyAppendsSince reports whether every snapshot of tbl's current ancestry
// after since (all of them when since is nil) is an append, so that an
// incremental append scan sees every row added since. It is false when
// since is not in the ancestry (expired, rolled back).
func onlyAppendsSince(tbl *table.Table, since *int64) bool {
	meta := tbl.Metadata()
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if since != nil && snap.SnapshotID == *since {
			return true
		}
		if snap.Summary == nil || snap.Summary.Operation != table.OpAppend {
			return false
		}
		if snap.ParentSnapshotID == nil {
			return since == nil
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return since == nil
}

// totalDataFiles is the snapshot's data file count from its summary.
func totalDataFiles(snap *table.Snapshot) int {
	if snap == nil || snap.Summary == nil {
		return 0
	}
	n, _ := strconv.Atoi(snap.Summary.Properties["total-data-files"])
	return n
}

// skipRuns is the form of BusinessOffsetsKey, AbsentOffsetsKey and their
// carried unions: per topic and partition (as a decimal string), sorted,
// merged runs [from, to) of offsets.
type skipRuns map[string]map[string][][2]int64

// add merges the runs of o into s.
func (s skipRuns) add(o skipRuns) {
	for topic, parts := range o {
		if s[topic] == nil {
			s[topic] = map[string][][2]int64{}
		}
		for p, runs := range parts {
			s[topic][p] = mergeRuns(append(slices.Clone(s[topic][p]), runs...))
		}
	}
}

// count is the number of runs held.
func (s skipRuns) count() int {
	n := 0
	for _, parts := range s {
		for _, runs := range parts {
			n += len(runs)
		}
	}
	return n
}

// encode renders s as JSON; equal sets encode equally.
func (s skipRuns) encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mergeRuns sorts runs and merges those that overlap or touch.
func mergeRuns(runs [][2]int64) [][2]int64 {
	slices.SortFunc(runs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := runs[:0]
	for _, r := range runs {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// decodeRuns parses a skipRuns value of summary key key, naming the
// snapshot and the problem.
func decodeRuns(snap *table.Snapshot, key, raw string) (skipRuns, error) {
	var v skipRuns
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("snapshot %d: decoding %s: %w", snap.SnapshotID, key, err)
	}
	for _, parts := range v {
		for ps, runs := range parts {
			if _, err := strconv.ParseInt(ps, 10, 32); err != nil {
				return nil, fmt.Errorf("snapshot %d: %s: partition %q: %w", snap.SnapshotID, key, ps, err)
			}
			for _, r := range runs {
				if r[0] < 0 || r[1] <= r[0] {
					return nil, fmt.Errorf("snapshot %d: %s: partition %s: run [%d, %d) is empty or negative", snap.SnapshotID, key, ps, r[0], r[1])
				}
			}
		}
	}
	return v, nil
}

// encodeCoords renders coordinates as BusinessOffsetsKey's JSON.
func encodeCoords(cs []coord) string {
	s := skipRuns{}
	for _, c := range cs {
		if s[c.topic] == nil {
			s[c.topic] = map[string][][2]int64{}
		}
		p := strconv.Itoa(int(c.partition))
		s[c.topic][p] = append(s[c.topic][p], [2]int64{c.offset, c.offset + 1})
	}
	for _, parts := range s {
		for p, runs := range parts {
			parts[p] = mergeRuns(runs)
		}
	}
	return s.encode()
}

// absentOf gathers the parts' Absent runs as AbsentOffsetsKey's value, at
// most maxCarriedRuns of them (coarsened): a flush of a compacted topic may
// skip a record in two, and every snapshot's summary stays in the metadata.
func absentOf(parts []Part) skipRuns {
	s := skipRuns{}
	for _, p := range parts {
		if len(p.Absent) > 0 {
			ps := strconv.Itoa(int(p.Range.Partition))
			s.add(skipRuns{p.Range.Topic: {ps: p.Absent}})
		}
	}
	return s.coarsened(maxCarriedRuns)
}

// maxCarriedRuns caps the runs a carried union (BusinessCarriedKey,
// AbsentCarriedKey) holds (about 20 bytes each, in every maintenance
// snapshot still in the metadata). Beyond it a union of skipped business
// duplicates is carried without its oldest runs (truncated), one of
// offsets absent from the log coarsened (coarsened): keeping the recording
// snapshots instead would stop expiry for good, since the unions only grow.
const maxCarriedRuns = 10000

// truncated returns s without its oldest runs, at most limit runs kept: the
// partitions with the most runs give up theirs first, each its lowest. The
// second result holds, per partition that gave up runs, the run from the
// first given up to the end of the last: where skipped duplicates are no
// longer all recorded (BusinessDroppedKey). Unlike coarsening, this claims
// no offset as skipped: a row there is not reported as both a row and a
// skipped duplicate; verify reports the uncovered offsets there as
// unchecked instead of as gaps.
func (s skipRuns) truncated(limit int) (kept, dropped skipRuns) {
	if s.count() <= limit {
		return s, skipRuns{}
	}
	// The largest per-partition quota c that keeps at most limit runs.
	quota := func(c int) int {
		n := 0
		for _, parts := range s {
			for _, runs := range parts {
				n += min(len(runs), c)
			}
		}
		return n
	}
	lo, hi := 0, limit // quota(lo) <= limit < quota(hi+1) once narrowed
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if quota(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	kept, dropped = skipRuns{}, skipRuns{}
	for topic, parts := range s {
		kept[topic] = map[string][][2]int64{}
		for p, runs := range parts {
			cut := max(len(runs)-lo, 0)
			kept[topic][p] = runs[cut:]
			if cut > 0 {
				if dropped[topic] == nil {
					dropped[topic] = map[string][][2]int64{}
				}
				dropped[topic][p] = [][2]int64{{runs[0][0], runs[cut-1][1]}}
			}
		}
	}
	return kept, dropped
}

// coarsened returns s with at most limit runs: the runs either side of the
// smallest holes between them are merged, so the result covers every
// offset of s and some of the holes' too. Of absent offsets, that only
// excuses a gap inside such a hole (verify then reports it as absent).
func (s skipRuns) coarsened(limit int) skipRuns {
	type hole struct {
		size        int64
		topic, part string
		at          int // index of the run before it
	}
	var holes []hole
	for topic, parts := range s {
		for p, runs := range parts {
			for i := 1; i < len(runs); i++ {
				holes = append(holes, hole{runs[i][0] - runs[i-1][1], topic, p, i - 1})
			}
		}
	}
	excess := s.count() - limit
	if excess <= 0 {
		return s
	}
	// Ties broken to a total order: holes of one size are the rule (a
	// transaction's marker every n records), and a choice among them that
	// followed the maps' random order made each call fill other holes, so
	// that maintenance, which computes the union twice and compares, refused
	// every commit.
	slices.SortFunc(holes, func(a, b hole) int {
		return cmp.Or(cmp.Compare(a.size, b.size), strings.Compare(a.topic, b.topic), strings.Compare(a.part, b.part), cmp.Compare(a.at, b.at))
	})
	fill := map[string]map[string]map[int]bool{}
	for _, h := range holes[:min(excess, len(holes))] {
		if fill[h.topic] == nil {
			fill[h.topic] = map[string]map[int]bool{}
		}
		if fill[h.topic][h.part] == nil {
			fill[h.topic][h.part] = map[int]bool{}
		}
		fill[h.topic][h.part][h.at] = true
	}
	out := skipRuns{}
	for topic, parts := range s {
		out[topic] = map[string][][2]int64{}
		for p, runs := range parts {
			var merged [][2]int64
			for i, r := range runs {
				if i > 0 && fill[topic][p][i-1] {
					merged[len(merged)-1][1] = r[1]
					continue
				}
				merged = append(merged, r)
			}
			out[topic][p] = merged
		}
	}
	return out
}

// runKeys names the summary keys of one kind of recorded offsets: each
// flush's own, and the union maintenance carries.
type runKeys struct{ own, carried string }

// recorded are the kinds of offsets floe records as runs: skipped business
// duplicates, and offsets absent from the log.
var (
	businessKeys = runKeys{BusinessOffsetsKey, BusinessCarriedKey}
	absentKeys   = runKeys{AbsentOffsetsKey, AbsentCarriedKey}
	// droppedKeys: only maintenance writes BusinessDroppedKey, always
	// beside BusinessCarriedKey.
	droppedKeys = runKeys{carried: BusinessDroppedKey}
	recorded    = []runKeys{businessKeys, absentKeys, droppedKeys}
)

// recordedRuns returns the offsets of kind k recorded in tbl's current
// ancestry: k.own of every snapshot from the head down to the newest one
// carrying k.carried, and that one's union. keep is how many parent steps
// below the head the deepest snapshot that must outlive expiry is (-1:
// none), for offsetMapDepth.
func recordedRuns(tbl *table.Table, k runKeys) (runs skipRuns, keep int, err error) {
	runs, keep = skipRuns{}, -1
	meta := tbl.Metadata()
	depth := 0
	for snap := meta.CurrentSnapshot(); snap != nil; depth++ {
		if raw, ok := summaryValue(snap, k.own); ok {
			v, err := decodeRuns(snap, k.own, raw)
			if err != nil {
				return nil, -1, err
			}
			runs.add(v)
			keep = depth
		}
		if raw, ok := summaryValue(snap, k.carried); ok {
			v, err := decodeRuns(snap, k.carried, raw)
			if err != nil {
				return nil, -1, err
			}
			runs.add(v)
			return runs, depth, nil
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return runs, keep, nil
}

// businessSkipped returns, per partition of topic, the sorted offsets the
// business-key MERGE skipped (recordedRuns).
func businessSkipped(tbl *table.Table, topic string) (map[int32][]int64, error) {
	runs, _, err := recordedRuns(tbl, businessKeys)
	if err != nil {
		return nil, err
	}
	out := map[int32][]int64{}
	for ps, rs := range runs[topic] {
		p, _ := strconv.ParseInt(ps, 10, 32) // checked by decodeRuns
		for _, r := range rs {
			for o := r[0]; o < r[1]; o++ {
				out[int32(p)] = append(out[int32(p)], o)
			}
		}
	}
	return out, nil
}

// absentRuns returns, per partition of topic, the runs of offsets the log
// did not hold when they were read (recordedRuns). Kept as runs: one run can
// be millions of offsets deleted by retention.
func absentRuns(tbl *table.Table, topic string) (map[int32][][2]int64, error) {
	return partitionRuns(tbl, topic, absentKeys)
}

// droppedRuns returns, per partition of topic, the runs of offsets where
// the table no longer records every skipped business duplicate
// (BusinessDroppedKey).
func droppedRuns(tbl *table.Table, topic string) (map[int32][][2]int64, error) {
	return partitionRuns(tbl, topic, droppedKeys)
}

// partitionRuns returns the runs of kind k recorded for topic
// (recordedRuns), per partition.
func partitionRuns(tbl *table.Table, topic string, k runKeys) (map[int32][][2]int64, error) {
	runs, _, err := recordedRuns(tbl, k)
	if err != nil {
		return nil, err
	}
	out := map[int32][][2]int64{}
	for ps, rs := range runs[topic] {
		p, _ := strconv.ParseInt(ps, 10, 32) // checked by decodeRuns
		out[int32(p)] = rs
	}
	return out, nil
}

func summaryValue(snap *table.Snapshot, key string) (string, bool) {
	if snap.Summary == nil {
		return "", false
	}
	v, ok := snap.Summary.Properties[key]
	return v, ok
}
