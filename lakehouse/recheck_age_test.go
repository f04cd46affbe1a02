package lakehouse_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/lakehouse"
)

// TestRecheckPastTheUncommittedAgeRefuses: the age limit on a flush's
// files (uncommittedMaxAge, 30 min; here 2 s) is checked after the
// re-checks a conflict makes, which read files (here a replay lands
// between the flush's MERGE and its commit, and reading a data file takes
// 3 s). Checked before them, the flush committed files older than the
// limit, which an orphan clean-up may have deleted meanwhile: rows lost
// behind an advanced watermark.
func TestRecheckPastTheUncommittedAgeRefuses(t *testing.T) {
	lakehouse.SetCompactAges(t, time.Hour, 2*time.Second)
	f := newFixture(t)
	other := f.open(t, "g") // creates the table
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark), f.part(t, 1, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	var delay atomic.Int64
	sc := &hookCatalog{Catalog: cat, readDelay: &delay, before: func() {
		if _, err := other.Commit(context.Background(), []lakehouse.Part{f.part(t, 1, 15, 20, lakehouse.Replay)}); err != nil {
			t.Error(err)
		}
		delay.Store(int64(3 * time.Second))
	}}
	tbl, err := lakehouse.OpenIn(t.Context(), sc, lakehouse.Config{Table: "analytics.clicks", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	_, err = tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 20, 10), f.part(t, 1, 10, 20, 10)})
	delay.Store(0)
	if err == nil || !strings.Contains(err.Error(), "not committed: an orphan clean-up") {
		t.Fatalf("commit of files past the age limit: %v, want it refused", err)
	}
	wm, err := tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := wm[topic][0]; got != 10 {
		t.Fatalf("partition 0's watermark %d after the refused commit, want 10", got)
	}
}
