package infra

import "testing"

// REST is a running Iceberg REST catalog: Iceberg's own test fixture
// (org.apache.iceberg.rest.RESTCatalogServer, Iceberg 1.10.1) on a SQLite
// JdbcCatalog, started by deploy/rest/start.sh.
type REST struct {
	// URI is the catalog's base URI, "http://127.0.0.1:port" (the
	// catalog property uri).
	URI string
	// Warehouse is where the catalog puts new tables.
	Warehouse string
	// Dir holds the catalog database (cat.db) and rest.log.
	Dir string
}

// StartREST starts a REST catalog whose tables go under warehouse
// ("file:///path" or "hdfs://host:port/path"; "" means a directory of its
// own), waits until GET /v1/config answers, and stops it when tb ends. The
// first run downloads the jars from Maven Central (cached).
func StartREST(tb testing.TB, warehouse string) *REST {
	tb.Helper()
	args := []string{}
	if warehouse != "" {
		args = append(args, warehouse)
	}
	dir, kv := Start(tb, "rest", args...)
	r := &REST{URI: kv["URI"], Warehouse: kv["WAREHOUSE"], Dir: dir}
	if r.URI == "" {
		tb.Fatalf("deploy/rest/start.sh printed no URI: %v", kv)
	}
	return r
}
