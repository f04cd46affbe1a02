package infra

import "testing"

// HMS is a running Hive standalone metastore (Hive 3.1.3 on embedded Derby)
// started by deploy/hms/start.sh. Hive 3, because Hive 4.0.1 dropped the
// get_table Thrift call that iceberg-go v0.7.0's hive catalog uses.
type HMS struct {
	// URI is the Thrift address, "thrift://127.0.0.1:port" (the catalog
	// property uri).
	URI string
	// Warehouse is the metastore's default warehouse directory.
	Warehouse string
	// Dir holds the Derby database, conf/ and the logs.
	Dir string
}

// StartHMS starts a metastore whose default warehouse is warehouse
// ("file:///path" or "hdfs://host:port/path"; "" means a directory of its
// own), waits until it answers a get_all_databases call, and stops it when
// tb ends. The first run downloads the jars from Maven Central (cached) and
// every fresh directory runs the schema tool (about 20 s).
func StartHMS(tb testing.TB, warehouse string) *HMS {
	tb.Helper()
	args := []string{}
	if warehouse != "" {
		args = append(args, warehouse)
	}
	dir, kv := Start(tb, "hms", args...)
	h := &HMS{URI: kv["URI"], Warehouse: kv["WAREHOUSE"], Dir: dir}
	if h.URI == "" {
		tb.Fatalf("deploy/hms/start.sh printed no URI: %v", kv)
	}
	return h
}
