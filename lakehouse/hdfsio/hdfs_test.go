package hdfsio_test

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/colinmarc/hdfs/v2"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/hdfsio"
	"github.com/floe-dev/floe/schemas"
)

// TestHDFS runs against a real NameNode and DataNode (deploy/hdfs, Hadoop
// 3.4.1) started once for all its subtests.
func TestHDFS(t *testing.T) {
	t.Parallel() // the simple and the Kerberized cluster start side by side
	h := infra.StartHDFS(t)
	props := map[string]string{hdfsio.PropUser: h.User}

	t.Run("RegisteredScheme", func(t *testing.T) {
		fsys, err := iceio.LoadFS(t.Context(), props, h.URL("/warehouse"))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fsys.(*hdfsio.FS); !ok {
			t.Fatalf("LoadFS(hdfs://...) = %T, want *hdfsio.FS", fsys)
		}
	})

	fsys, err := hdfsio.Load(h.NameNode, props)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Conformance", func(t *testing.T) { conformance(t, fsys, h.URL("/conformance")) })
	t.Run("BareAbsolutePaths", func(t *testing.T) {
		if err := fsys.WriteFile("/bare/f", []byte("bare")); err != nil {
			t.Fatal(err)
		}
		b, err := fsys.ReadFile(h.URL("/bare/f"))
		if err != nil || string(b) != "bare" {
			t.Fatalf("read via URI of a file written via bare path: %q, %v", b, err)
		}
		for root, want := range map[string][]string{
			"/bare":             {"/bare", "/bare/f"},
			h.URL("/bare/"):     {h.URL("/bare/"), h.URL("/bare/f")},
			h.URL("/x/../bare"): {h.URL("/x/../bare"), h.URL("/bare/f")},
		} {
			var got []string
			if err := fsys.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				got = append(got, path)
				return err
			}); err != nil || !slices.Equal(got, want) {
				t.Errorf("WalkDir(%q) visited %q, %v; want %q", root, got, err, want)
			}
		}
	})
	t.Run("DeleteFiles", func(t *testing.T) {
		var names []string
		for i := range 3 {
			names = append(names, h.URL(fmt.Sprintf("/bulk/f%d", i)))
			if err := fsys.WriteFile(names[i], []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, h.URL("/bulk/never-existed"))
		deleted, err := fsys.DeleteFiles(t.Context(), names)
		if err != nil || len(deleted) != 4 {
			t.Fatalf("DeleteFiles: %q, %v", deleted, err)
		}
		for _, n := range names {
			if _, err := fsys.Stat(n); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s after DeleteFiles: %v", n, err)
			}
		}
	})
	t.Run("OtherAuthorityRefused", func(t *testing.T) {
		_, err := fsys.ReadFile("hdfs://elsewhere:8020/x")
		if err == nil || !strings.Contains(err.Error(), "this IO serves hdfs://"+h.NameNode) {
			t.Fatalf("reading another cluster's path: %v", err)
		}
	})
	t.Run("NamenodeServesEveryAuthority", func(t *testing.T) {
		// A table moved to an HA nameservice keeps files under the old
		// authority: with hdfs.namenode set, both are read (as README
		// says; every other authority was refused).
		ns, err := hdfsio.Load("ns1", map[string]string{hdfsio.PropUser: h.User, hdfsio.PropNamenode: h.NameNode})
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.WriteFile("hdfs://ns1/moved/f", []byte("moved")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{h.URL("/moved/f"), "hdfs://ns1/moved/f", "hdfs://alias:8020/moved/f"} {
			if b, err := ns.ReadFile(name); err != nil || string(b) != "moved" {
				t.Errorf("read %s: %q, %v", name, b, err)
			}
		}
	})
	t.Run("PermissionDenied", func(t *testing.T) {
		admin, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{h.NameNode}, User: h.User})
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := admin.Mkdir("/private", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := admin.CreateEmptyFile("/private/secret"); err != nil {
			t.Fatal(err)
		}
		other, err := hdfsio.Load(h.NameNode, map[string]string{hdfsio.PropUser: "mallory"})
		if err != nil {
			t.Fatal(err)
		}
		if other.User() != "mallory" {
			t.Fatalf("User() = %q", other.User())
		}
		for op, err := range map[string]error{
			"WriteFile": other.WriteFile(h.URL("/private/new"), []byte("x")),
			"Remove":    other.Remove(h.URL("/private/secret")),
			"ReadFile":  func() error { _, err := other.ReadFile(h.URL("/private/secret")); return err }(),
		} {
			if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), `HDFS user "mallory"`) ||
				!strings.Contains(err.Error(), "/private/") {
				t.Errorf("%s as another user in a 0700 directory: %v; want a permission error naming the user and path", op, err)
			}
		}
	})
	t.Run("UnreachableNameNode", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		start := time.Now()
		_, err = hdfsio.Load(addr, map[string]string{hdfsio.PropUser: h.User, hdfsio.PropDialTimeout: "2s"})
		if err == nil || !strings.Contains(err.Error(), "NameNode "+addr) {
			t.Fatalf("Load of an unreachable NameNode: %v; want an error naming %s", err, addr)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("failing took %s", d)
		}
		_, err = iceio.LoadFS(t.Context(), map[string]string{hdfsio.PropUser: h.User}, "hdfs:///no-authority")
		if err == nil || !strings.Contains(err.Error(), hdfsio.PropNamenode) {
			t.Fatalf("hdfs:/// without %s: %v", hdfsio.PropNamenode, err)
		}
	})
	t.Run("IcebergTableOnHDFS", func(t *testing.T) { icebergTable(t, h, props) })
	t.Run("TableItsUserCannotWrite", func(t *testing.T) { tableItsUserCannotWrite(t, h, props) })
	t.Run("UncleanLocationHasNoOrphans", func(t *testing.T) { uncleanLocation(t, h, props) })
}

// icebergTable commits floe flushes to a SQLite-catalog table whose warehouse
// is on HDFS, the hdfs:// IO configured by props (a user, or a Kerberos
// login), and reads the rows back with an iceberg-go scan.
func icebergTable(t *testing.T, h *infra.HDFS, props map[string]string) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	catalog := map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(t.TempDir(), "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": h.URL("/warehouse"),
	}
	maps.Copy(catalog, props)
	cfg := lakehouse.Config{Table: "analytics.clicks", Group: "g", Catalog: catalog}
	tbl, err := lakehouse.Open(t.Context(), cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()

	rows := func(p int32, from, to int64) arrow.RecordBatch {
		b := sc.NewBuilder(memory.DefaultAllocator, 0)
		defer b.Release()
		for o := from; o < to; o++ {
			v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
			if err := b.Append([]byte(v), schemas.Meta{Topic: "clicks", Partition: p, Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
				t.Fatal(err)
			}
		}
		return b.NewRecord()
	}
	part := func(p int32, from, to, resume int64) lakehouse.Part {
		return lakehouse.Part{Range: lakehouse.Range{Topic: "clicks", Partition: p, From: from, To: to}, Resume: resume, Rows: rows(p, from, to)}
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{part(0, 0, 3000, lakehouse.NoWatermark), part(1, 0, 2000, lakehouse.NoWatermark)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 5000 || res.Files < 2 {
		t.Fatalf("first commit: %+v", res)
	}
	// A replay overlapping the committed range: the MERGE reads the Parquet
	// files back from HDFS and skips what is there.
	res, err = tbl.Commit(t.Context(), []lakehouse.Part{part(0, 2500, 4000, lakehouse.Replay)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1000 || res.Skipped != 500 {
		t.Fatalf("replay: %d rows appended, %d skipped; want 1000, 500", res.Rows, res.Skipped)
	}

	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if loc := it.Location(); !strings.HasPrefix(loc, h.URL("/warehouse/")) {
		t.Fatalf("table location %q is not under the HDFS warehouse", loc)
	}
	at, err := it.Scan(table.WithSelectedFields(lakehouse.PartitionColumn, lakehouse.OffsetColumn)).ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	seen := map[[2]int64]int{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		ps := rec.Column(rec.Schema().FieldIndices(lakehouse.PartitionColumn)[0]).(*array.Int32)
		offs := rec.Column(rec.Schema().FieldIndices(lakehouse.OffsetColumn)[0]).(*array.Int64)
		for i := range int(rec.NumRows()) {
			seen[[2]int64{int64(ps.Value(i)), offs.Value(i)}]++
		}
	}
	if len(seen) != 6000 {
		t.Fatalf("scan found %d distinct (partition, offset), want 6000", len(seen))
	}
	for _, want := range []struct{ p, to int64 }{{0, 4000}, {1, 2000}} {
		for o := range want.to {
			if n := seen[[2]int64{want.p, o}]; n != 1 {
				t.Fatalf("partition %d offset %d present %d times", want.p, o, n)
			}
		}
	}

	// The data and metadata files are on HDFS, not on the local disk.
	fsys, err := hdfsio.Load(h.NameNode, props)
	if err != nil {
		t.Fatal(err)
	}
	var parquet, metadata int
	err = fsys.WalkDir(it.Location(), func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case strings.HasSuffix(path, ".parquet"):
			parquet++
		case strings.HasSuffix(path, ".metadata.json"):
			metadata++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if parquet < 3 || metadata < 2 {
		t.Fatalf("on HDFS under %s: %d Parquet and %d metadata files; want at least 3 and 2", it.Location(), parquet, metadata)
	}
}

// tableItsUserCannotWrite: a table opened as an HDFS user who may read its
// files but not write them (a wrong hdfs.user, a changed ACL) fails
// CheckWrite naming the location and the user, and a commit fails with a
// permission error (fs.ErrPermission, which ends a scheduled run). Nothing
// checked write access before: `floe run` started and failed every flush.
func tableItsUserCannotWrite(t *testing.T, h *infra.HDFS, props map[string]string) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	catalog := map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(t.TempDir(), "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": h.URL("/readonly"),
	}
	maps.Copy(catalog, props)
	owner, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.clicks", Group: "g", Catalog: catalog}, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := owner.CheckWrite(t.Context()); err != nil {
		t.Fatalf("CheckWrite as the table's owner: %v", err)
	}

	catalog[hdfsio.PropUser] = "mallory" // may read (0755), not write
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.clicks", Group: "g", Catalog: catalog, Existing: true}, sc)
	if err != nil {
		t.Fatalf("opening a table its user may read: %v", err)
	}
	defer tbl.Close()
	err = tbl.CheckWrite(t.Context())
	data := h.URL("/readonly/analytics.db/clicks/data")
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), `HDFS user "mallory"`) ||
		!strings.Contains(err.Error(), "under "+data) {
		t.Fatalf("CheckWrite as a user who cannot write: %v; want a permission error naming %s and the user", err, data)
	}
	b := sc.NewBuilder(memory.DefaultAllocator, 0)
	for o := range int64(10) {
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: "clicks", Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	rows := b.NewRecord()
	b.Release()
	_, err = tbl.Commit(t.Context(), []lakehouse.Part{{Range: lakehouse.Range{Topic: "clicks", From: 0, To: 10},
		Resume: lakehouse.NoWatermark, Rows: rows}})
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Commit as a user who cannot write: %v; want fs.ErrPermission", err)
	}
}

// uncleanLocation: a table created at a location spelled with "//" has
// its files named in its metadata in clean form (iceberg-go joins paths
// cleanly), and orphan clean-up compares them as spelled with what WalkDir
// lists below that location: every file committed there is referenced,
// none an orphan. (WalkDir listing them as the location spells them would
// have every one taken for an orphan.)
func uncleanLocation(t *testing.T, h *infra.HDFS, props map[string]string) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	props = maps.Clone(props)
	maps.Copy(props, map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(t.TempDir(), "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite", "warehouse": h.URL("/warehouse"),
	})
	cat, err := lakehouse.OpenCatalog(t.Context(), props)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(t.Context(), table.Identifier{"odd"}, nil); err != nil {
		t.Fatal(err)
	}
	loc := h.URL("/odd//clicks")
	if _, err := cat.CreateTable(t.Context(), table.Identifier{"odd", "clicks"}, sc.Iceberg, catalog.WithLocation(loc)); err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.OpenIn(t.Context(), cat, lakehouse.Config{Table: "odd.clicks", Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	b := sc.NewBuilder(memory.DefaultAllocator, 0)
	for o := range int64(100) {
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: "clicks", Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	rows := b.NewRecord()
	b.Release()
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{{Range: lakehouse.Range{Topic: "clicks", From: 0, To: 100},
		Resume: lakehouse.NoWatermark, Rows: rows}}); err != nil {
		t.Fatal(err)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if it.Location() != loc {
		t.Fatalf("table location %q, want %q", it.Location(), loc)
	}
	plan, err := it.PlanOrphanFiles(t.Context(), table.WithFilesOlderThan(0))
	if err != nil {
		t.Fatal(err)
	}
	if files := plan.Files(); len(files) != 0 {
		t.Fatalf("%d of the table's files taken for orphans, e.g. %v", len(files), files[0])
	}
}
