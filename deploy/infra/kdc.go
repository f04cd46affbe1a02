package infra

import (
	"slices"
	"strings"
	"testing"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"
)

// KDC is a Kerberos KDC (Hadoop's MiniKdc, Apache Kerby) run by
// deploy/kdc/start.sh on 127.0.0.1 over TCP; it is stopped when the test
// ends.
type KDC struct {
	// Realm is EXAMPLE.COM.
	Realm string
	// Addr is "127.0.0.1:port".
	Addr string
	// Krb5Conf is a krb5.conf naming the KDC and the realm.
	Krb5Conf string
	// Keytab holds the keys of every principal the KDC was started with.
	Keytab string
	// Principals are "name[/host]@REALM", in the order given to StartKDC.
	Principals []string
	// Dir holds the KDC's data, kdc.env and kdc.log; deploy/hdfs/start.sh
	// --kerberos Dir reads kdc.env.
	Dir string
}

// HDFSPrincipals are the service principals a Kerberized deploy/hdfs needs
// in its KDC: the NameNode's, the DataNode's and the web endpoints' (SPNEGO).
var HDFSPrincipals = []string{"nn/localhost", "dn/localhost", "HTTP/localhost"}

// StartKDC starts a KDC with principals (each "name" or "name/host", without
// the realm) holding random keys, all written to one keytab; checks that the
// first principal gets a ticket-granting ticket with that keytab (gokrb5, as
// floe logs in); and stops the KDC when tb ends. The first start downloads
// MiniKdc's jars from Maven Central (cached).
func StartKDC(tb testing.TB, principals ...string) *KDC {
	tb.Helper()
	if len(principals) == 0 {
		tb.Fatal("StartKDC: no principals")
	}
	dir, kv := Start(tb, "kdc", principals...)
	k := &KDC{Realm: kv["REALM"], Addr: kv["KDC"], Krb5Conf: kv["KRB5_CONF"], Keytab: kv["KEYTAB"], Dir: dir}
	if k.Realm == "" || k.Krb5Conf == "" || k.Keytab == "" || kv["PRINCIPALS"] == "" {
		tb.Fatalf("deploy/kdc/start.sh printed no REALM, KRB5_CONF, KEYTAB or PRINCIPALS: %v", kv)
	}
	k.Principals = strings.Split(kv["PRINCIPALS"], ",")
	cl := k.Login(tb, principals[0])
	cl.Destroy()
	return k
}

// Has reports whether the KDC was started with principal ("name[/host]",
// without the realm).
func (k *KDC) Has(principal string) bool {
	return slices.Contains(k.Principals, principal+"@"+k.Realm)
}

// Login obtains a TGT for principal ("name[/host]", without the realm) with
// the KDC's keytab, failing tb if the KDC does not issue one.
func (k *KDC) Login(tb testing.TB, principal string) *krbclient.Client {
	tb.Helper()
	conf, err := krbconfig.Load(k.Krb5Conf)
	if err != nil {
		tb.Fatalf("kdc: loading %s: %v", k.Krb5Conf, err)
	}
	kt, err := keytab.Load(k.Keytab)
	if err != nil {
		tb.Fatalf("kdc: loading %s: %v", k.Keytab, err)
	}
	cl := krbclient.NewWithKeytab(principal, k.Realm, kt, conf, krbclient.DisablePAFXFAST(true))
	if err := cl.Login(); err != nil {
		tb.Fatalf("kdc at %s: login as %s@%s with %s: %v", k.Addr, principal, k.Realm, k.Keytab, err)
	}
	return cl
}
