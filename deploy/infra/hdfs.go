package infra

import (
	"testing"
)

// HDFS is a running single-node HDFS (a NameNode and a DataNode of Hadoop
// 3.4.1) started by deploy/hdfs/start.sh.
type HDFS struct {
	// NameNode is the RPC address, "127.0.0.1:port": fs.defaultFS is
	// hdfs://NameNode.
	NameNode string
	// User is the HDFS superuser (the OS user running the daemons);
	// permissions are checked for every other user.
	User string
	// Dir holds the data, the generated conf/ (core-site.xml,
	// hdfs-site.xml) and the daemons' logs.
	Dir string
}

// URL is "hdfs://" + NameNode + p (p starts with "/").
func (h *HDFS) URL(p string) string { return "hdfs://" + h.NameNode + p }

// StartHDFS starts HDFS in a fresh temporary directory, waits until the
// DataNode is registered and a write works, and stops it when tb ends. The
// first run downloads Hadoop's jars from Maven Central (cached).
func StartHDFS(tb testing.TB) *HDFS {
	tb.Helper()
	dir := tb.TempDir()
	kv := Start(tb, "hdfs", dir)
	h := &HDFS{NameNode: kv["NAMENODE"], User: kv["USER"], Dir: dir}
	if h.NameNode == "" || h.User == "" {
		tb.Fatalf("deploy/hdfs/start.sh printed no NAMENODE or USER: %v", kv)
	}
	return h
}
