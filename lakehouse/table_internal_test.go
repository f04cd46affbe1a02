package lakehouse

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floe-dev/floe/schemas"
)

// TestSQLitePath: the file a SQLite uri names, as the driver reads it, or
// none for an in-memory database.
func TestSQLitePath(t *testing.T) {
	for _, tc := range []struct {
		uri, want string
		ok        bool
	}{
		{"/tmp/c.db", "/tmp/c.db", true},
		{"c.db", "c.db", true},
		{"file:/tmp/c.db", "/tmp/c.db", true},
		{"file:/tmp/c.db?_pragma=busy_timeout(30000)", "/tmp/c.db", true},
		{"file:///tmp/c.db", "/tmp/c.db", true},
		{"file://localhost/tmp/c.db", "/tmp/c.db", true},
		{"file:c.db?mode=rwc", "c.db", true},
		{"file:/tmp/a%20b.db", "/tmp/a b.db", true},
		{"file://otherhost/tmp/c.db", "", false},
		{":memory:", "", false},
		{"file::memory:?cache=shared", "", false},
		{"file:c.db?mode=memory", "", false},
		{"", "", false},
	} {
		got, ok := sqlitePath(tc.uri)
		if got != tc.want || ok != tc.ok {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q, %v", tc.uri, got, ok, tc.want, tc.ok)
		}
	}
}

// TestOpenExistingRefusesMissingSQLiteDatabase: Open with Existing (verify,
// maintain, doctor) on a sql catalog whose SQLite file does not exist (a
// misspelt uri) fails naming table.catalog.uri and creates no file; it
// created an empty catalog database there before refusing the table.
// Without Existing the database is created, as floe run needs.
func TestOpenExistingRefusesMissingSQLiteDatabase(t *testing.T) {
	sc, err := schemas.Lookup("clickstream")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "catalgo.db")
	cfg := Config{Table: "a.clicks", Group: "g", Existing: true, Catalog: map[string]string{
		"type": "sql", "uri": "file:" + db, "sql.dialect": "sqlite", "sql.driver": "sqlite", "warehouse": "file://" + dir + "/wh"}}
	_, err = Open(t.Context(), cfg, sc)
	if want := "table.catalog.uri file:" + db + ": the SQLite database " + db + " does not exist"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Open(Existing) on a missing SQLite database: %v, want %q", err, want)
	}
	if _, serr := os.Stat(db); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("Open(Existing) created %s (%v)", db, serr)
	}
	cfg.Existing = false
	tbl, err := Open(t.Context(), cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	tbl.Close()
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("Open without Existing did not create the database: %v", err)
	}
}
