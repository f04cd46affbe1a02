package hdfsio_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/lakehouse/hdfsio"
)

// TestHDFSKerberos runs against a Kerberized HDFS (deploy/hdfs --kerberos:
// Kerberos RPC authentication, block access tokens, SASL data transfer
// protection "authentication", HTTPS-only web servers) and a real KDC
// (deploy/kdc, Hadoop's MiniKdc), both started once for all its subtests.
// floe logs in as floe@EXAMPLE.COM from a keytab, with gokrb5.
func TestHDFSKerberos(t *testing.T) {
	t.Parallel() // the simple and the Kerberized cluster start side by side
	kdc := infra.StartKDC(t, append(slices.Clone(infra.HDFSPrincipals), "floe")...)
	h := infra.StartHDFS(t, infra.WithKerberos(kdc))
	props := kerberosProps(h, "floe@"+kdc.Realm, kdc.Keytab)

	fsys, err := hdfsio.Load(h.NameNode, props)
	if err != nil {
		t.Fatal(err)
	}
	if fsys.User() != "floe" {
		t.Fatalf("User() = %q, want the principal's short name floe", fsys.User())
	}
	t.Run("Conformance", func(t *testing.T) { conformance(t, fsys, h.URL("/conformance")) })
	t.Run("IcebergTableOnHDFS", func(t *testing.T) { icebergTable(t, h, props) })

	// The failures below must name what failed: the principal and keytab,
	// the KDC's answer, the NameNode.
	t.Run("WrongKeytab", func(t *testing.T) {
		// floe's principal with a key the KDC does not have (as after a
		// key rotation): the KDC refuses the pre-authentication.
		bad := writeKeytab(t, "floe", kdc.Realm, "not-the-key")
		_, err := hdfsio.Load(h.NameNode, kerberosProps(h, "floe@"+kdc.Realm, bad))
		wantErr(t, err, "Kerberos: login as floe@"+kdc.Realm, "keytab "+bad, "PREAUTH_FAILED")
	})
	t.Run("UnknownPrincipal", func(t *testing.T) {
		kt := writeKeytab(t, "ghost", kdc.Realm, "whatever")
		_, err := hdfsio.Load(h.NameNode, kerberosProps(h, "ghost@"+kdc.Realm, kt))
		wantErr(t, err, "Kerberos: login as ghost@"+kdc.Realm, "KDC_ERR_C_PRINCIPAL_UNKNOWN")
	})
	t.Run("PrincipalNotInKeytab", func(t *testing.T) {
		// A principal the KDC knows, with a keytab that holds only floe.
		kt := writeKeytab(t, "floe", kdc.Realm, "not-the-key")
		_, err := hdfsio.Load(h.NameNode, kerberosProps(h, "HTTP/localhost@"+kdc.Realm, kt))
		wantErr(t, err, "Kerberos: login as HTTP/localhost@"+kdc.Realm, "keytab "+kt, "key not found")
	})
	t.Run("WrongServicePrincipal", func(t *testing.T) {
		p := kerberosProps(h, "floe@"+kdc.Realm, kdc.Keytab)
		p[hdfsio.PropServicePrincipal] = "nn/elsewhere@" + kdc.Realm
		_, err := hdfsio.Load(h.NameNode, p)
		wantErr(t, err, "NameNode "+h.NameNode, "KDC_ERR_S_PRINCIPAL_UNKNOWN")
	})
	t.Run("MissingDataTransferProtection", func(t *testing.T) {
		p := kerberosProps(h, "floe@"+kdc.Realm, kdc.Keytab)
		delete(p, hdfsio.PropDataTransferProtection)
		other, err := hdfsio.Load(h.NameNode, p) // the NameNode does not need it
		if err != nil {
			t.Fatal(err)
		}
		err = other.WriteFile(h.URL("/no-sasl/f"), []byte("x"))
		wantErr(t, err, "/no-sasl/f", hdfsio.PropDataTransferProtection)
		if n := strings.Count(err.Error(), hdfsio.PropDataTransferProtection); n != 1 {
			t.Fatalf("the hint appears %d times: %v", n, err)
		}
	})
	t.Run("SimpleAuthRefused", func(t *testing.T) {
		_, err := hdfsio.Load(h.NameNode, map[string]string{hdfsio.PropUser: "floe", hdfsio.PropDialTimeout: "5s"})
		wantErr(t, err, "NameNode "+h.NameNode, "refused simple authentication", "requires Kerberos", hdfsio.PropKeytab)
	})
}

// kerberosProps are the catalog properties of a keytab login to h.
func kerberosProps(h *infra.HDFS, principal, keytab string) map[string]string {
	return map[string]string{
		hdfsio.PropPrincipal:              principal,
		hdfsio.PropKeytab:                 keytab,
		hdfsio.PropKrb5Conf:               h.Kerberos.KDC.Krb5Conf,
		hdfsio.PropServicePrincipal:       h.Kerberos.NameNodePrincipal,
		hdfsio.PropDataTransferProtection: h.Kerberos.DataTransferProtection,
	}
}

// writeKeytab writes a keytab holding name@realm's AES keys derived from
// password, and returns its path.
func writeKeytab(t *testing.T, name, realm, password string) string {
	t.Helper()
	kt := keytab.New()
	for _, e := range []int32{etypeID.AES256_CTS_HMAC_SHA1_96, etypeID.AES128_CTS_HMAC_SHA1_96} {
		if err := kt.AddEntry(name, realm, password, time.Now(), 1, e); err != nil {
			t.Fatal(err)
		}
	}
	b, err := kt.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".keytab")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantErr fails t unless err is non-nil and its message holds every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %q", err, p)
		}
	}
	t.Logf("as expected: %v", err)
}
