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
	// User is the HDFS superuser (the OS user running the daemons; "nn",
	// the NameNode's principal, under Kerberos); permissions are checked
	// for every other user.
	User string
	// Dir holds the data, the generated conf/ (core-site.xml,
	// hdfs-site.xml) and the daemons' logs.
	Dir string
	// Kerberos is set when the cluster was started WithKerberos.
	Kerberos *HDFSKerberos
}

// HDFSKerberos describes a Kerberized HDFS: what a client needs besides its
// own principal and keytab.
type HDFSKerberos struct {
	// KDC is the KDC the cluster authenticates against.
	KDC *KDC
	// NameNodePrincipal is dfs.namenode.kerberos.principal,
	// "nn/localhost@REALM".
	NameNodePrincipal string
	// DataTransferProtection is dfs.data.transfer.protection of the
	// DataNode ("authentication").
	DataTransferProtection string
}

// HDFSOption configures StartHDFS.
type HDFSOption func(*hdfsStart)

type hdfsStart struct{ kdc *KDC }

// WithKerberos starts a secure cluster against kdc, which must have been
// started with HDFSPrincipals: Kerberos RPC authentication, block access
// tokens, SASL data transfer protection and HTTPS-only web servers. The
// principal floe@REALM, if the KDC has it, is in the superuser group.
func WithKerberos(kdc *KDC) HDFSOption { return func(s *hdfsStart) { s.kdc = kdc } }

// URL is "hdfs://" + NameNode + p (p starts with "/").
func (h *HDFS) URL(p string) string { return "hdfs://" + h.NameNode + p }

// StartHDFS starts HDFS in a fresh temporary directory, waits until the
// DataNode is registered and a write works, and stops it when tb ends. The
// first run downloads Hadoop's jars from Maven Central (cached).
func StartHDFS(tb testing.TB, opts ...HDFSOption) *HDFS {
	tb.Helper()
	var s hdfsStart
	for _, o := range opts {
		o(&s)
	}
	var args []string
	if s.kdc != nil {
		for _, p := range HDFSPrincipals {
			if !s.kdc.Has(p) {
				tb.Fatalf("StartHDFS WithKerberos: the KDC has no principal %s (start it with infra.HDFSPrincipals)", p)
			}
		}
		args = []string{"--kerberos", s.kdc.Dir}
	}
	dir, kv := Start(tb, "hdfs", args...)
	h := &HDFS{NameNode: kv["NAMENODE"], User: kv["USER"], Dir: dir}
	if h.NameNode == "" || h.User == "" {
		tb.Fatalf("deploy/hdfs/start.sh printed no NAMENODE or USER: %v", kv)
	}
	if s.kdc != nil {
		h.Kerberos = &HDFSKerberos{KDC: s.kdc, NameNodePrincipal: kv["NAMENODE_PRINCIPAL"], DataTransferProtection: kv["DATA_TRANSFER_PROTECTION"]}
		if h.Kerberos.NameNodePrincipal == "" || h.Kerberos.DataTransferProtection == "" {
			tb.Fatalf("deploy/hdfs/start.sh --kerberos printed no NAMENODE_PRINCIPAL or DATA_TRANSFER_PROTECTION: %v", kv)
		}
	}
	return h
}
