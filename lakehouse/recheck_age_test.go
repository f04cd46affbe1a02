package lakehouse_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
)

type localIO interface {
	iceio.WriteFileIO
	iceio.ReadFileIO
	iceio.ListableIO
	iceio.StatIO
}

// slowReadIO: reading a data file takes delay (a slow storage, a big file).
type slowReadIO struct {
	localIO
	delay *atomic.Int64
}

func (s slowReadIO) Open(name string) (iceio.File, error) {
	if d := s.delay.Load(); d > 0 && strings.HasSuffix(name, ".parquet") {
		time.Sleep(time.Duration(d))
	}
	return s.localIO.Open(name)
}

type slowReadCat struct {
	catalog.Catalog
	delay  atomic.Int64
	mu     sync.Mutex
	before func()
}

func (c *slowReadCat) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	fsF := func(ctx context.Context) (iceio.IO, error) {
		fs, err := tbl.FS(ctx)
		if err != nil {
			return nil, err
		}
		return slowReadIO{fs.(localIO), &c.delay}, nil
	}
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), fsF, c), nil
}

func (c *slowReadCat) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	c.mu.Lock()
	fn := c.before
	c.before = nil
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

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
	sc := &slowReadCat{Catalog: cat}
	tbl, err := lakehouse.OpenIn(t.Context(), sc, lakehouse.Config{Table: "analytics.clicks", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark), f.part(t, 1, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	sc.mu.Lock()
	sc.before = func() {
		if _, err := other.Commit(context.Background(), []lakehouse.Part{f.part(t, 1, 15, 20, lakehouse.Replay)}); err != nil {
			t.Error(err)
		}
		sc.delay.Store(int64(3 * time.Second))
	}
	sc.mu.Unlock()
	_, err = tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 20, 10), f.part(t, 1, 10, 20, 10)})
	sc.delay.Store(0)
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
