package hdfsio

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigFromProps(t *testing.T) {
	for _, tc := range []struct {
		name      string
		authority string
		props     map[string]string
		want      Config
	}{
		{"authority", "nn:9000", nil, Config{Namenodes: []string{"nn:9000"}}},
		{"default port", "nn", nil, Config{Namenodes: []string{"nn:8020"}}},
		{"HA list overrides a nameservice authority", "prod", map[string]string{PropNamenode: "nn1:8020, nn2"},
			Config{Namenodes: []string{"nn1:8020", "nn2:8020"}}},
		{"alias", "", map[string]string{PropNamenodes: "nn1:1"}, Config{Namenodes: []string{"nn1:1"}}},
		// An IPv6 literal holds ':' with no port: it was taken for host:port,
		// and refused as no host:port, naming hdfs.namenode.
		{"IPv6 default port", "[::1]", nil, Config{Namenodes: []string{"[::1]:8020"}}},
		{"IPv6 HA list", "ns", map[string]string{PropNamenode: "[fd00::5], [fd00::6]:9000"},
			Config{Namenodes: []string{"[fd00::5]:8020", "[fd00::6]:9000"}}},
		{"user, protection, timeout", "nn:1", map[string]string{PropUser: "floe", PropDataTransferProtection: "privacy", PropDialTimeout: "3s"},
			Config{Namenodes: []string{"nn:1"}, User: "floe", DataTransferProtection: "privacy", DialTimeout: 3 * time.Second}},
		{"kerberos", "nn:1", map[string]string{PropKeytab: "/etc/floe.keytab", PropPrincipal: "floe/host@EXAMPLE.COM",
			PropKrb5Conf: "/etc/krb5.conf", PropServicePrincipal: "nn/_HOST@EXAMPLE.COM"},
			Config{Namenodes: []string{"nn:1"}, Kerberos: &KerberosConfig{Keytab: "/etc/floe.keytab",
				Principal: "floe/host@EXAMPLE.COM", Krb5Conf: "/etc/krb5.conf", ServicePrincipal: "nn/_HOST@EXAMPLE.COM"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromProps(tc.authority, tc.props)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Namenodes, tc.want.Namenodes) || got.User != tc.want.User ||
				got.DataTransferProtection != tc.want.DataTransferProtection || got.DialTimeout != tc.want.DialTimeout ||
				(got.Kerberos == nil) != (tc.want.Kerberos == nil) || (got.Kerberos != nil && *got.Kerberos != *tc.want.Kerberos) {
				t.Fatalf("got %+v (kerberos %+v), want %+v (kerberos %+v)", got, got.Kerberos, tc.want, tc.want.Kerberos)
			}
		})
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	krb := func(kv ...string) map[string]string {
		m := map[string]string{PropKeytab: "/k.keytab", PropPrincipal: "floe@R", PropServicePrincipal: "nn/_HOST@R"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		authority string
		props     map[string]string
		want      string
	}{
		{"no namenode", "", nil, PropNamenode},
		{"aliases disagree", "", map[string]string{PropNamenode: "a:1", PropNamenodes: "b:1"}, "disagree"},
		{"bad address", "", map[string]string{PropNamenode: "a:1:2"}, PropNamenode},
		{"bad protection", "nn:1", map[string]string{PropDataTransferProtection: "secret"}, PropDataTransferProtection},
		{"bad timeout", "nn:1", map[string]string{PropDialTimeout: "soon"}, PropDialTimeout},
		{"negative timeout", "nn:1", map[string]string{PropDialTimeout: "-1s"}, PropDialTimeout},
		{"principal without keytab", "nn:1", krb(PropKeytab, ""), PropKeytab},
		{"keytab without principal", "nn:1", krb(PropPrincipal, ""), PropPrincipal},
		{"principal without realm", "nn:1", krb(PropPrincipal, "floe"), PropPrincipal},
		{"no service principal", "nn:1", krb(PropServicePrincipal, ""), PropServicePrincipal},
		{"user with kerberos", "nn:1", krb(PropUser, "root"), PropUser},
		{"misspelt key", "nn:1", map[string]string{"hdfs.kerberos.keytb": "/k.keytab"}, "hdfs.kerberos.keytb: not a property"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromProps(tc.authority, tc.props)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestKerberosLoginErrors(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "krb5.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n default_realm = EXAMPLE.COM\n[realms]\n EXAMPLE.COM = {\n  kdc = 127.0.0.1:1\n }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := KerberosConfig{Keytab: filepath.Join(dir, "missing.keytab"), Principal: "floe@EXAMPLE.COM", Krb5Conf: conf, ServicePrincipal: "nn/_HOST@EXAMPLE.COM"}
	if _, err := k.login(); err == nil || !strings.Contains(err.Error(), PropKeytab) || !strings.Contains(err.Error(), "missing.keytab") {
		t.Fatalf("login with a missing keytab: %v", err)
	}
	k.Krb5Conf = filepath.Join(dir, "nope.conf")
	if _, err := k.login(); err == nil || !strings.Contains(err.Error(), PropKrb5Conf) {
		t.Fatalf("login with a missing krb5.conf: %v", err)
	}
	if got := k.servicePrincipalName(); got != "nn/_HOST" {
		t.Fatalf("servicePrincipalName = %q, want nn/_HOST", got)
	}
}
