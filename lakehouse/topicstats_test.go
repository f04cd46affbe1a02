package lakehouse_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// Two jobs writing one table (README), whose topics share their first 16
// characters: iceberg-go's default string statistics, truncate(16), give
// both the same bounds.
const (
	webTopic = "prod.clickstream.web"
	appTopic = "prod.clickstream.app"
)

// topicPart is fixture.part for partition 0 of topic tp.
func topicPart(t *testing.T, f *fixture, tp string, from, to, resume int64) lakehouse.Part {
	t.Helper()
	b := f.schema.NewBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for o := from; o < to; o++ {
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: tp, Partition: 0, Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	return lakehouse.Part{Range: lakehouse.Range{Topic: tp, Partition: 0, From: from, To: to}, Resume: resume, Rows: b.NewRecord()}
}

// commitTopicRounds commits rounds flushes of n offsets of partition 0 of
// tp from offset 0 and returns the watermark reached.
func commitTopicRounds(t *testing.T, f *fixture, tbl *lakehouse.Table, tp string, rounds, n int64) int64 {
	t.Helper()
	for r := range rounds {
		lo, resume := r*n, r*n
		if lo == 0 {
			resume = lakehouse.NoWatermark
		}
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{topicPart(t, f, tp, lo, lo+n, resume)}); err != nil {
			t.Fatal(err)
		}
	}
	return rounds * n
}

// liveFiles describes each live data file as "rows: topic bounds", the
// bounds as one value when they are equal and as "lo..hi" otherwise, sorted.
func liveFiles(t *testing.T, tbl *lakehouse.Table) []string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fld, _ := it.Schema().FindFieldByName(lakehouse.TopicColumn)
	tasks, err := it.Scan().PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, task := range tasks {
		lo, hi := string(task.File.LowerBoundValues()[fld.ID]), string(task.File.UpperBoundValues()[fld.ID])
		bounds := lo
		if lo != hi {
			bounds = lo + ".." + hi
		}
		files = append(files, fmt.Sprintf("%d: %s", task.File.Count(), bounds))
	}
	slices.Sort(files)
	return files
}

// TestMaintainCompactsTopicsSharingAPrefixApart: compaction keeps one Kafka
// partition per file (ARCHITECTURE), also for topics whose bounds would be
// the same truncated to 16 characters, so a flush at its watermark still
// reads no data file.
func TestMaintainCompactsTopicsSharingAPrefixApart(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	web, app := f.open(t, "g-web"), f.open(t, "g-app")
	nextWeb := commitTopicRounds(t, f, web, webTopic, 3, 20)
	commitTopicRounds(t, f, app, appTopic, 3, 1000) // offsets far beyond web's

	rep, err := web.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CompactedGroups != 2 || rep.FilesWritten != 2 {
		t.Errorf("compaction made %d groups into %d files, want 2 groups (one per topic) into 2 files", rep.CompactedGroups, rep.FilesWritten)
	}
	if files, want := liveFiles(t, web), []string{"3000: " + appTopic, "60: " + webTopic}; !slices.Equal(files, want) {
		t.Errorf("live files (rows: topic bounds) %q, want %q", files, want)
	}
	res, err := web.Commit(ctx, []lakehouse.Part{topicPart(t, f, webTopic, nextWeb, nextWeb+20, nextWeb)})
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesScanned != 0 || res.Rows != 20 {
		t.Errorf("flush at the watermark read %d data files and appended %d rows, want 0 and 20", res.FilesScanned, res.Rows)
	}
}

// TestCommitAtWatermarkPrunesATopicSharingItsPrefix: the MERGE's statistics
// pruning tells two topics sharing their first 16 characters apart.
func TestCommitAtWatermarkPrunesATopicSharingItsPrefix(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	web, app := f.open(t, "g-web"), f.open(t, "g-app")
	if _, err := app.Commit(ctx, []lakehouse.Part{topicPart(t, f, appTopic, 0, 1000, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	if _, err := web.Commit(ctx, []lakehouse.Part{topicPart(t, f, webTopic, 0, 20, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	res, err := web.Commit(ctx, []lakehouse.Part{topicPart(t, f, webTopic, 20, 40, 20)})
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesScanned != 0 {
		t.Errorf("flush at the watermark read %d data files (the other topic's), want 0", res.FilesScanned)
	}
}

// TestOpenRecordsWholeTopicBoundsOnAnOldTable: a table created before floe
// asked for whole topic bounds gets the property when a job opens it, without
// a snapshot (the offset maps stay); its older files, with truncated topic
// bounds, are still compacted one topic per file (the topic read from their
// Parquet footers), and the MERGE still finds their rows.
func TestOpenRecordsWholeTopicBoundsOnAnOldTable(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	const key = "write.metadata.metrics.column." + lakehouse.TopicColumn
	web, app := f.open(t, "g-web"), f.open(t, "g-app")
	it, err := web.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if it.Properties()[key] != "full" {
		t.Fatalf("new table: %s is %q, want full", key, it.Properties()[key])
	}
	tx := it.NewTransaction()
	if err := tx.RemoveProperties([]string{key}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	nextWeb := commitTopicRounds(t, f, web, webTopic, 3, 20)
	commitTopicRounds(t, f, app, appTopic, 3, 1000)
	const truncated = "prod.clickstream..prod.clickstrean"
	for _, file := range liveFiles(t, web) {
		if !strings.HasSuffix(file, ": "+truncated) {
			t.Fatalf("old table: file %q, want its topic bounds truncated", file)
		}
	}

	rep, err := web.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Outputs of 60 and 3000 rows from inputs of 20 (web) and 1000 (app)
	// rows hold one topic each.
	files, want := liveFiles(t, web), []string{"3000: " + truncated, "60: " + truncated}
	if rep.CompactedGroups != 2 || rep.FilesWritten != 2 || !slices.Equal(files, want) {
		t.Errorf("compaction made %d groups into %d files, live files (rows: topic bounds) %q; want 2 groups into %q",
			rep.CompactedGroups, rep.FilesWritten, files, want)
	}
	// Truncated bounds never prune a file that may hold the topic.
	res, err := web.Commit(ctx, []lakehouse.Part{topicPart(t, f, webTopic, 0, nextWeb, lakehouse.Replay)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != nextWeb || res.Rows != 0 {
		t.Errorf("replay of [0, %d): %d rows skipped, %d appended; want all skipped", nextWeb, res.Skipped, res.Rows)
	}

	before, err := web.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reopened := f.open(t, "g-web")
	after, err := reopened.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Properties()[key] != "full" {
		t.Errorf("reopened old table: %s is %q, want full", key, after.Properties()[key])
	}
	if a, b := after.CurrentSnapshot().SnapshotID, before.CurrentSnapshot().SnapshotID; a != b {
		t.Errorf("setting the property made snapshot %d (was %d)", a, b)
	}
	for _, c := range []struct {
		tbl   *lakehouse.Table
		topic string
		want  int64
	}{{reopened, webTopic, nextWeb}, {app, appTopic, 3000}} {
		wm, err := c.tbl.Watermarks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w, _ := wm.Get(c.topic, 0); w != c.want {
			t.Errorf("after the property update W(%s, 0) = %d, want %d", c.topic, w, c.want)
		}
	}
	if _, err := reopened.Commit(ctx, []lakehouse.Part{topicPart(t, f, webTopic, nextWeb, nextWeb+25, nextWeb)}); err != nil {
		t.Fatal(err)
	}
	if files := liveFiles(t, reopened); !slices.Contains(files, "25: "+webTopic) {
		t.Errorf("live files (rows: topic bounds) %q, want the one written after the update, %q", files, "25: "+webTopic)
	}
}
