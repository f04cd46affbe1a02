package lakehouse

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go/table"
)

// Snapshot summary keys written by every floe commit. The offset map is the
// source of truth for where each partition resumes (DESIGN.md, commit protocol
// step 1); Kafka's committed offsets are only a copy for lag tooling.
const (
	// OffsetsKeyPrefix + group holds the group's full offset map as JSON:
	// {"topic": {"partition": nextOffset}}.
	OffsetsKeyPrefix = "floe.offsets."
	// FirstKeyPrefix + group holds, in the offset map's form, the first
	// offset the group's live commits covered of each partition: the From
	// of the first commit that set the partition's watermark (a part that
	// resumed from NoWatermark; never a replay's). Below it the job never
	// read (retention had trimmed the log, start_offset: latest, a route
	// that joined later), so verify counts a partition's gaps from it and
	// takes rows below it for a replay's. Every later commit and every
	// maintenance snapshot carries it, like the offset map. A partition
	// whose watermark was set before floe recorded this key has no entry.
	FirstKeyPrefix = "floe.first."
	// CommitIDKey holds the unique id of the flush that made the snapshot, so an
	// ambiguous commit can be recognised after a reload.
	CommitIDKey = "floe.commit-id"
	// RangesKey holds the offset ranges the snapshot added, as JSON.
	RangesKey = "floe.ranges"
	// RowsKey holds how many rows the snapshot added after the dedupe MERGE.
	RowsKey = "floe.rows"
	// DuplicatesKey holds how many rows the dedupe MERGE skipped.
	DuplicatesKey = "floe.duplicates-skipped"
	// BusinessDuplicatesKey holds how many rows the business-key MERGE
	// skipped (a dedupe key is set): same key, other offset.
	BusinessDuplicatesKey = "floe.duplicates-business"
	// BusinessOffsetsKey holds the offsets of the rows the business-key
	// MERGE skipped in this snapshot's flush, as JSON {"topic":
	// {"partition": [[from, to], ...]}} with sorted, merged runs [from, to):
	// verify counts them as covered, like dead letters.
	BusinessOffsetsKey = "floe.duplicates-business.offsets"
	// BusinessCarriedKey holds, in the same form, the union of every
	// BusinessOffsetsKey and BusinessCarriedKey at and below the snapshot
	// in its ancestry. Maintenance (and re-enrich) snapshots write it, so
	// that expiring the snapshots below them loses no skipped offset. Above
	// a cap (maxCarriedRuns, 10,000 runs) it holds the newest runs only, and
	// BusinessDroppedKey says below which offsets the dropped ones lay.
	BusinessCarriedKey = "floe.duplicates-business.carried"
	// BusinessDroppedKey holds, in BusinessOffsetsKey's form, the runs of
	// offsets where BusinessCarriedKey no longer records every skipped
	// duplicate (from the first to the end of the last run it dropped at
	// the cap, each time): verify counts the offsets there that no row or
	// dead letter covers as unchecked, not as gaps.
	BusinessDroppedKey = "floe.duplicates-business.dropped"
	// AbsentOffsetsKey holds, in BusinessOffsetsKey's form, the offsets of
	// this snapshot's flush that the log did not hold when it was read:
	// records removed by compaction, or deleted by retention before they
	// were read (the offsets floe_offset_gaps_total counts), and offsets
	// holding no record (transactions' markers, aborted transactions'
	// records). verify counts them as covered and reports them apart from
	// gaps.
	AbsentOffsetsKey = "floe.absent.offsets"
	// AbsentCarriedKey is to AbsentOffsetsKey what BusinessCarriedKey is to
	// BusinessOffsetsKey: the union maintenance carries, under the same cap.
	AbsentCarriedKey = "floe.absent.carried"
	// PartitionsKeyPrefix + topic holds the topic's partition count when the
	// snapshot was committed: a later, larger count means keys hashed to
	// other partitions since (see PartitionCountOf).
	PartitionsKeyPrefix = "floe.partitions."
	// PartitionCountsKeyPrefix + topic holds, on maintenance snapshots,
	// the topic's partition counts the ancestry recorded, oldest first
	// ("4,6"), once there are two: expiry then may drop the snapshots that
	// recorded the older ones (see PartitionCountsOf).
	PartitionCountsKeyPrefix = "floe.partition-counts."
	// RoutingKeyPrefix + topic holds the fingerprint of the topic's routing
	// the commit was made under (which tables split the topic, by which
	// field and values): `floe run` refuses a routing change that would not
	// apply from a common offset (see RoutingOf).
	RoutingKeyPrefix = "floe.routing."
	// RoutingSinceKeyPrefix + topic holds, with every RoutingKeyPrefix +
	// topic, the offsets from which that routing applies to the table, as
	// JSON {"partition": offset}: its watermarks when the routing changed
	// ({} when no change is known). Below them the table took records under
	// an earlier routing, so a replay may not start there (RoutingSinceOf).
	RoutingSinceKeyPrefix = "floe.routing-since."
)

// Offsets maps topic → partition → next offset to read: every offset below it
// is in the table (or the dead-letter topic) exactly once.
type Offsets map[string]map[int32]int64

// Get returns the next offset of topic/partition and whether it is known.
func (o Offsets) Get(topic string, partition int32) (int64, bool) {
	off, ok := o[topic][partition]
	return off, ok
}

// Set records next as the next offset of topic/partition.
func (o Offsets) Set(topic string, partition int32, next int64) {
	if o[topic] == nil {
		o[topic] = make(map[int32]int64)
	}
	o[topic][partition] = next
}

// Clone returns a deep copy.
func (o Offsets) Clone() Offsets {
	c := make(Offsets, len(o))
	for t, ps := range o {
		c[t] = maps.Clone(ps)
	}
	return c
}

// MarshalJSON writes partitions as string keys, the shape other engines expect
// from a JSON object.
func (o Offsets) MarshalJSON() ([]byte, error) {
	out := make(map[string]map[string]int64, len(o))
	for t, ps := range o {
		m := make(map[string]int64, len(ps))
		for p, off := range ps {
			m[strconv.Itoa(int(p))] = off
		}
		out[t] = m
	}
	return json.Marshal(out)
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (o *Offsets) UnmarshalJSON(b []byte) error {
	var in map[string]map[string]int64
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	res := make(Offsets, len(in))
	for t, ps := range in {
		for k, off := range ps {
			p, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return fmt.Errorf("partition %q of topic %q: %w", k, t, err)
			}
			res.Set(t, int32(p), off)
		}
	}
	*o = res
	return nil
}

// Range is a contiguous block of offsets [From, To) of one partition that a
// flush covers: every offset in it is either a row or a dead-lettered record.
type Range struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
}

func (r Range) String() string {
	return fmt.Sprintf("%s/%d[%d,%d)", r.Topic, r.Partition, r.From, r.To)
}

// sortRanges orders ranges by topic and partition so summaries are stable.
func sortRanges(rs []Range) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Topic != rs[j].Topic {
			return rs[i].Topic < rs[j].Topic
		}
		if rs[i].Partition != rs[j].Partition {
			return rs[i].Partition < rs[j].Partition
		}
		return rs[i].From < rs[j].From
	})
}

// WatermarksOf returns the group's offset map from the newest snapshot in the
// current branch's ancestry that carries one, or an empty map when none does.
// Maintenance snapshots carry every group's map (offsetMaps), but walking
// the ancestry (not just the head) still matters: another group's commits
// carry only their own map, and snapshots written by other engines (or by
// an earlier floe's maintenance) carry none.
func WatermarksOf(tbl *table.Table, group string) (Offsets, error) {
	return newestOffsets(tbl, OffsetsKeyPrefix+group)
}

// FirstOffsetsOf returns the group's first live offsets (FirstKeyPrefix)
// from the newest snapshot in the current ancestry that carries them, or an
// empty map when none does (a table written before floe recorded them).
func FirstOffsetsOf(tbl *table.Table, group string) (Offsets, error) {
	return newestOffsets(tbl, FirstKeyPrefix+group)
}

// newestOffsets decodes the offset map under key of the newest snapshot in
// the current ancestry that carries one, or returns an empty map.
func newestOffsets(tbl *table.Table, key string) (Offsets, error) {
	raw, id, ok := newestProperty(tbl, key)
	if !ok {
		return Offsets{}, nil
	}
	var o Offsets
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return nil, fmt.Errorf("snapshot %d: decoding %s: %w", id, key, err)
	}
	return o, nil
}

// PartitionCountOf returns the partition count of topic recorded by the
// newest floe commit in the current ancestry, and false when none recorded
// one.
func PartitionCountOf(tbl *table.Table, topic string) (int, bool) {
	raw, _, ok := newestProperty(tbl, PartitionsKeyPrefix+topic)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(raw)
	return n, err == nil
}

// PartitionCountsOf returns the partition counts of topic that the
// current ancestry recorded, oldest first, without repeats: more than one
// means partitions were added while the table ingested the topic.
func PartitionCountsOf(tbl *table.Table, topic string) []int {
	counts, _ := partitionCountHistory(tbl, topic)
	return counts
}

// partitionCountHistory returns PartitionCountsOf and how many parent
// steps below the head the snapshots go that it is read from: the newest
// carrying PartitionCountsKeyPrefix+topic, else the newest recording the
// oldest count (0 with one count: PartitionsKeyPrefix carries it).
func partitionCountHistory(tbl *table.Table, topic string) (counts []int, depth int) {
	meta := tbl.Metadata()
	var newestFirst []int
	// push adds an older count unless it repeats the last; it reports
	// whether it did.
	push := func(raw string) bool {
		n, err := strconv.Atoi(raw)
		if err != nil || len(newestFirst) > 0 && newestFirst[len(newestFirst)-1] == n {
			return false
		}
		newestFirst = append(newestFirst, n)
		return true
	}
	i := 0
	for snap := meta.CurrentSnapshot(); snap != nil; i++ {
		if snap.Summary != nil {
			if push(snap.Summary.Properties[PartitionsKeyPrefix+topic]) && len(newestFirst) > 1 {
				depth = i
			}
			if raw, ok := snap.Summary.Properties[PartitionCountsKeyPrefix+topic]; ok {
				for _, f := range slices.Backward(strings.Split(raw, ",")) {
					push(f)
				}
				depth = i
				break
			}
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	slices.Reverse(newestFirst)
	return newestFirst, depth
}

// RoutingOf returns the routing fingerprint of topic recorded by the newest
// floe commit in the current ancestry, and false when none recorded one.
func RoutingOf(tbl *table.Table, topic string) (string, bool) {
	raw, _, ok := newestProperty(tbl, RoutingKeyPrefix+topic)
	return raw, ok
}

// RoutingSinceOf returns the offsets, per partition of topic, from which the
// routing RoutingOf returns applies to the table (none: since its first
// commit, or unknown). It is read from the snapshot that recorded that
// routing, never from an older one, which may hold an earlier change's.
func RoutingSinceOf(tbl *table.Table, topic string) (map[int32]int64, error) {
	var since map[int32]int64
	if err := json.Unmarshal([]byte(routingSinceRaw(tbl, topic)), &since); err != nil {
		return nil, fmt.Errorf("decoding %s%s: %w", RoutingSinceKeyPrefix, topic, err)
	}
	return since, nil
}

// routingSinceRaw returns the RoutingSinceKeyPrefix value of the newest
// snapshot in the current ancestry that recorded topic's routing, "{}" when
// it holds none (it was written before the key existed).
func routingSinceRaw(tbl *table.Table, topic string) string {
	meta := tbl.Metadata()
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if snap.Summary != nil {
			if _, ok := snap.Summary.Properties[RoutingKeyPrefix+topic]; ok {
				return cmp.Or(snap.Summary.Properties[RoutingSinceKeyPrefix+topic], "{}")
			}
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return "{}"
}

// OffsetMapsOf returns the newest offset map of every group that committed
// to the table (floe.offsets.<group>), keyed by group.
func OffsetMapsOf(tbl *table.Table) (map[string]Offsets, error) {
	out := map[string]Offsets{}
	for k, raw := range offsetMaps(tbl) {
		group, ok := strings.CutPrefix(k, OffsetsKeyPrefix)
		if !ok {
			continue
		}
		var o Offsets
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", k, err)
		}
		out[group] = o
	}
	return out, nil
}

// newestProperty returns the value of a snapshot summary key in the newest
// snapshot of the current branch's ancestry that carries it, and that
// snapshot's ID.
func newestProperty(tbl *table.Table, key string) (value string, snapshotID int64, ok bool) {
	meta := tbl.Metadata()
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if snap.Summary != nil {
			if v, ok := snap.Summary.Properties[key]; ok {
				return v, snap.SnapshotID, true
			}
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return "", 0, false
}
