package lakehouse_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/floe-dev/floe/lakehouse"
)

// firstOffsets returns the group's first live offsets as the table holds them.
func firstOffsets(t *testing.T, tbl *lakehouse.Table, group string) lakehouse.Offsets {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	first, err := lakehouse.FirstOffsetsOf(it, group)
	if err != nil {
		t.Fatal(err)
	}
	return first
}

// TestCommitRecordsFirstLiveOffsets: the first live offset of a partition
// is the From of the commit that set its first watermark (of its first
// part, when one flush holds two); replays and later commits leave it, and
// every commit of the group carries the map.
func TestCommitRecordsFirstLiveOffsets(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.commitEvents(t, tbl, 0, 100, 200, lakehouse.NoWatermark, clean(0, 100, 200))
	f.commitEvents(t, tbl, 0, 0, 50, lakehouse.Replay, clean(0, 0, 50))
	f.commitEvents(t, tbl, 1, 0, 10, lakehouse.Replay, clean(1, 0, 10))
	f.commitEvents(t, tbl, 0, 200, 210, 200, clean(0, 200, 210))
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 2, 20, 30, lakehouse.NoWatermark), f.part(t, 2, 30, 40, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(lakehouse.Offsets{topic: {0: 100, 2: 20}})
	if got := fmt.Sprint(firstOffsets(t, tbl, "g")); got != want {
		t.Fatalf("first live offsets %s, want %s", got, want)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for snap := it.CurrentSnapshot(); snap != nil; snap = it.SnapshotByID(*snap.ParentSnapshotID) {
		if _, ok := snap.Summary.Properties[lakehouse.FirstKeyPrefix+"g"]; !ok {
			t.Errorf("snapshot %d carries no %sg", snap.SnapshotID, lakehouse.FirstKeyPrefix)
		}
		if snap.ParentSnapshotID == nil {
			break
		}
	}
	r := verify(t, tbl, lakehouse.DeadLetters{})
	// Partition 1 has only replayed rows: no watermark, no first offset.
	if p := partitionOf(t, r, 0); p.First != 100 || p.BelowFirst != 50 || p.GapOffsets != 0 || partitionOf(t, r, 1).First != -1 {
		t.Fatalf("partition 0: %+v\n%s", p, text(t, r))
	}
}

// TestMaintenanceKeepsFirstLiveOffsets: compaction and expiry carry every
// group's first live offsets (a group whose only commit is expired
// included), so verify still counts gaps from them afterwards.
func TestMaintenanceKeepsFirstLiveOffsets(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	other := f.open(t, "other")
	commitRounds(t, f, other, []int32{7}, 0, 1, 30)
	tbl := f.open(t, "g")
	commitRounds(t, f, tbl, []int32{0, 1}, 0, 6, 20)
	want := map[string]string{}
	for _, g := range []string{"g", "other"} {
		want[g] = fmt.Sprint(firstOffsets(t, tbl, g))
	}
	if want["g"] != fmt.Sprint(lakehouse.Offsets{topic: {0: 0, 1: 0}}) || want["other"] != fmt.Sprint(lakehouse.Offsets{topic: {7: 0}}) {
		t.Fatalf("first live offsets before maintenance: %v", want)
	}
	time.Sleep(20 * time.Millisecond) // every snapshot is older than ExpireOlderThan

	rep, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CompactedGroups == 0 || rep.SnapshotsExpired == 0 {
		t.Fatalf("compacted %d groups, expired %d snapshots: want both", rep.CompactedGroups, rep.SnapshotsExpired)
	}
	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head := it.CurrentSnapshot().Summary.Properties; head[lakehouse.FirstKeyPrefix+"g"] == "" || head[lakehouse.FirstKeyPrefix+"other"] == "" {
		t.Fatalf("the maintenance snapshot carries no first live offsets: %v", head)
	}
	for _, g := range []string{"g", "other"} {
		if got := fmt.Sprint(firstOffsets(t, tbl, g)); got != want[g] {
			t.Errorf("group %s: first live offsets %s after maintenance, want %s", g, got, want[g])
		}
	}

	f.dropFiles(t, tbl, 1, 120) // every row of partition 1
	r := verify(t, tbl, lakehouse.DeadLetters{})
	if p := partitionOf(t, r, 1); r.OK() || p.GapOffsets != 120 {
		t.Fatalf("partition 1 lost after maintenance: %+v\n%s", p, text(t, r))
	}
}

// appendAsOldFloe appends evs of partition p with a snapshot that carries
// the group's offset map and nothing else of floe's: what floe committed
// before it recorded first live offsets.
func (f *fixture) appendAsOldFloe(t *testing.T, tbl *lakehouse.Table, group string, p int32, evs []ev, wm lakehouse.Offsets) {
	t.Helper()
	b, err := json.Marshal(wm)
	if err != nil {
		t.Fatal(err)
	}
	f.appendPlain(t, tbl, p, evs, iceberg.Properties{lakehouse.OffsetsKeyPrefix + group: string(b)})
}

// TestVerifyTableWithoutFirstLiveOffsets: a table written before floe
// recorded first live offsets verifies as before, counting gaps from the
// lowest offset seen (its oldest rows lost are not reported), and so do its
// partitions once floe commits to it again; a partition floe starts
// afterwards is counted from its first live offset.
func TestVerifyTableWithoutFirstLiveOffsets(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.appendAsOldFloe(t, tbl, "g", 0, clean(0, 0, 50), lakehouse.Offsets{topic: {0: 50}})
	f.appendAsOldFloe(t, tbl, "g", 1, clean(1, 0, 30), lakehouse.Offsets{topic: {0: 50, 1: 30}})
	f.appendAsOldFloe(t, tbl, "g", 0, clean(0, 50, 100), lakehouse.Offsets{topic: {0: 100, 1: 30}})
	if r := verify(t, tbl, lakehouse.DeadLetters{}); !r.OK() || r.Rows != 130 {
		t.Fatalf("old table:\n%s", text(t, r))
	}
	f.dropFiles(t, tbl, 0, 50)
	f.dropFiles(t, tbl, 1, 30)

	r := verify(t, tbl, lakehouse.DeadLetters{})
	s := text(t, r)
	if !r.OK() || r.Rows != 50 {
		t.Fatalf("old table after the loss, want OK as before:\n%s", s)
	}
	if p := partitionOf(t, r, 0); p.First != -1 || p.MinOffset != 50 || p.GapOffsets != 0 {
		t.Fatalf("partition 0: %+v", p)
	}
	if !strings.Contains(s, "partition 1: nothing seen below watermark 30, gaps not checked") {
		t.Fatalf("text:\n%s", s)
	}

	// floe commits again: partitions 0 and 1 had watermarks before, so
	// they get no first live offset; partition 2 starts now.
	f.commitEvents(t, tbl, 0, 100, 110, 100, clean(0, 100, 110))
	f.commitEvents(t, tbl, 2, 5, 20, lakehouse.NoWatermark, clean(2, 5, 20))
	if got, want := fmt.Sprint(firstOffsets(t, tbl, "g")), fmt.Sprint(lakehouse.Offsets{topic: {2: 5}}); got != want {
		t.Fatalf("first live offsets %s, want %s", got, want)
	}
	r = verify(t, tbl, lakehouse.DeadLetters{})
	if !r.OK() || partitionOf(t, r, 0).First != -1 || partitionOf(t, r, 2).First != 5 {
		t.Fatalf("after floe committed again:\n%s", text(t, r))
	}
	f.dropFiles(t, tbl, 2, 20)
	if r = verify(t, tbl, lakehouse.DeadLetters{}); r.OK() || fmt.Sprint(partitionOf(t, r, 2).Gaps) != "[[5,20)]" {
		t.Fatalf("partition 2 lost:\n%s", text(t, r))
	}
}
