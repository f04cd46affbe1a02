package hdfsio

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"
)

// Catalog property keys read by the hdfs:// IO. They sit beside the catalog's
// own keys in table.catalog (floe's config) and so reach every catalog floe
// opens, and every table loaded through it.
const (
	// PropNamenode is the NameNode RPC address host:port, or several
	// separated by commas (HA: tried in order). Default: the host:port of the
	// hdfs:// location, port 8020 when it has none.
	PropNamenode = "hdfs.namenode"
	// PropNamenodes is an alias of PropNamenode.
	PropNamenodes = "hdfs.namenodes"
	// PropUser is the HDFS user for simple authentication. Default:
	// $HADOOP_USER_NAME, else the OS user. Ignored (an error) with Kerberos,
	// where the principal is the user.
	PropUser = "hdfs.user"
	// PropKeytab is the path of a keytab holding PropPrincipal's key; setting
	// it turns Kerberos on.
	PropKeytab = "hdfs.kerberos.keytab"
	// PropPrincipal is the client principal, "name[/instance]@REALM".
	PropPrincipal = "hdfs.kerberos.principal"
	// PropKrb5Conf is the krb5.conf path. Default: $KRB5_CONFIG, else
	// /etc/krb5.conf.
	PropKrb5Conf = "hdfs.kerberos.krb5-conf"
	// PropServicePrincipal is the NameNode's principal as in
	// dfs.namenode.kerberos.principal ("nn/_HOST@REALM" or "nn/host");
	// the realm is dropped, _HOST is replaced by each NameNode's host.
	PropServicePrincipal = "hdfs.kerberos.service-principal-name"
	// PropDataTransferProtection is dfs.data.transfer.protection of the
	// cluster: "", authentication, integrity or privacy.
	PropDataTransferProtection = "hdfs.data-transfer-protection"
	// PropDialTimeout bounds connecting to a NameNode or DataNode, as a Go
	// duration ("10s", the default).
	PropDialTimeout = "hdfs.dial-timeout"
	// PropIOTimeout bounds each read or write on a NameNode or DataNode
	// connection, as a Go duration ("2m", the default).
	PropIOTimeout = "hdfs.io-timeout"
)

const defaultNamenodePort = "8020"

// known are the keys ConfigFromProps reads; another key starting "hdfs."
// is refused: a misspelt Kerberos key would otherwise fall back to simple
// authentication.
var known = []string{PropNamenode, PropNamenodes, PropUser, PropKeytab, PropPrincipal, PropKrb5Conf,
	PropServicePrincipal, PropDataTransferProtection, PropDialTimeout, PropIOTimeout}

// Config says how to reach one HDFS: where its NameNodes are, and who the
// client is.
type Config struct {
	// Namenodes are NameNode RPC addresses, host:port, tried in order.
	Namenodes []string
	// User is the HDFS user under simple authentication.
	User string
	// Kerberos, when set, authenticates with a keytab instead.
	Kerberos *KerberosConfig
	// DataTransferProtection is "", authentication, integrity or privacy.
	DataTransferProtection string
	// DialTimeout bounds each connection attempt; 0 means 10s.
	DialTimeout time.Duration
	// IOTimeout bounds each read or write on a connection; 0 means 2m.
	IOTimeout time.Duration
	// AnyAuthority: the NameNodes were given (PropNamenode), so they serve
	// every hdfs:// location, whatever its authority.
	AnyAuthority bool
}

// KerberosConfig is a keytab login. Paths are not secrets and may appear in
// errors; the keytab's content never does.
type KerberosConfig struct {
	Keytab           string
	Principal        string
	Krb5Conf         string
	ServicePrincipal string
}

// ConfigFromProps builds the Config for an hdfs:// location's authority
// (host[:port], may be empty) from catalog properties. It does not touch the
// network or the keytab; validate does that much checking as can be done
// offline.
func ConfigFromProps(authority string, props map[string]string) (Config, error) {
	var cfg Config
	for _, k := range slices.Sorted(maps.Keys(props)) {
		if strings.HasPrefix(k, "hdfs.") && !slices.Contains(known, k) {
			return cfg, fmt.Errorf("%s: not a property of the hdfs:// IO (%s)", k, strings.Join(known, ", "))
		}
	}
	nn := props[PropNamenode]
	if nn == "" {
		nn = props[PropNamenodes]
	} else if props[PropNamenodes] != "" && props[PropNamenodes] != nn {
		return cfg, fmt.Errorf("%s and %s disagree (%q, %q): set one", PropNamenode, PropNamenodes, nn, props[PropNamenodes])
	}
	if nn == "" {
		nn = authority
	}
	if nn == "" {
		return cfg, fmt.Errorf("no NameNode: set %s or use hdfs://host:port/... locations", PropNamenode)
	}
	for _, a := range strings.Split(nn, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil && strings.Contains(err.Error(), "missing port") {
			a = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), defaultNamenodePort)
		}
		cfg.Namenodes = append(cfg.Namenodes, a)
	}
	cfg.User = props[PropUser]
	cfg.DataTransferProtection = props[PropDataTransferProtection]
	cfg.AnyAuthority = props[PropNamenode] != "" || props[PropNamenodes] != ""
	for key, d := range map[string]*time.Duration{PropDialTimeout: &cfg.DialTimeout, PropIOTimeout: &cfg.IOTimeout} {
		if s := props[key]; s != "" {
			v, err := time.ParseDuration(s)
			if err != nil {
				return cfg, fmt.Errorf("%s: %q is not a duration: %w", key, s, err)
			}
			*d = v
		}
	}
	k := KerberosConfig{
		Keytab:           props[PropKeytab],
		Principal:        props[PropPrincipal],
		Krb5Conf:         props[PropKrb5Conf],
		ServicePrincipal: props[PropServicePrincipal],
	}
	if k != (KerberosConfig{}) {
		cfg.Kerberos = &k
	}
	return cfg, cfg.validate()
}

func (c *Config) validate() error {
	if len(c.Namenodes) == 0 {
		return fmt.Errorf("%s: no NameNode address", PropNamenode)
	}
	for _, a := range c.Namenodes {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("%s: %q is not host:port", PropNamenode, a)
		}
	}
	switch c.DataTransferProtection {
	case "", "authentication", "integrity", "privacy":
	default:
		return fmt.Errorf("%s: %q is not one of authentication, integrity, privacy", PropDataTransferProtection, c.DataTransferProtection)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("%s: must be positive, got %s", PropDialTimeout, c.DialTimeout)
	}
	if c.IOTimeout < 0 {
		return fmt.Errorf("%s: must be positive, got %s", PropIOTimeout, c.IOTimeout)
	}
	if c.Kerberos == nil {
		return nil
	}
	k := c.Kerberos
	if c.User != "" {
		return fmt.Errorf("%s is set together with Kerberos: the user is the principal %s; unset one", PropUser, PropPrincipal)
	}
	if k.Keytab == "" {
		return fmt.Errorf("Kerberos: %s must be set (only keytab logins are supported)", PropKeytab)
	}
	if k.Principal == "" {
		return fmt.Errorf("Kerberos: %s must be set", PropPrincipal)
	}
	if _, _, err := splitPrincipal(k.Principal); err != nil {
		return err
	}
	if k.ServicePrincipal == "" {
		return fmt.Errorf("Kerberos: %s must be set (the NameNode's principal, e.g. nn/_HOST@REALM)", PropServicePrincipal)
	}
	return nil
}

// splitPrincipal splits "name[/instance]@REALM" into "name[/instance]" and
// "REALM".
func splitPrincipal(p string) (name, realm string, err error) {
	name, realm, ok := strings.Cut(p, "@")
	if !ok || name == "" || realm == "" || strings.Contains(realm, "@") {
		return "", "", fmt.Errorf("%s: %q is not name@REALM", PropPrincipal, p)
	}
	return name, realm, nil
}

// servicePrincipalName is what colinmarc/hdfs expects: the NameNode principal
// without its realm.
func (k *KerberosConfig) servicePrincipalName() string {
	spn, _, _ := strings.Cut(k.ServicePrincipal, "@")
	return spn
}

// login loads krb5.conf and the keytab and obtains a TGT.
func (k *KerberosConfig) login() (*krbclient.Client, error) {
	confPath := k.Krb5Conf
	if confPath == "" {
		confPath = os.Getenv("KRB5_CONFIG")
	}
	if confPath == "" {
		confPath = "/etc/krb5.conf"
	}
	kconf, err := krbconfig.Load(confPath)
	if err != nil {
		return nil, fmt.Errorf("Kerberos: loading %s %s: %w", PropKrb5Conf, confPath, err)
	}
	kt, err := keytab.Load(k.Keytab)
	if err != nil {
		return nil, fmt.Errorf("Kerberos: loading %s %s: %w", PropKeytab, k.Keytab, err)
	}
	name, realm, err := splitPrincipal(k.Principal)
	if err != nil {
		return nil, err
	}
	cl := krbclient.NewWithKeytab(name, realm, kt, kconf, krbclient.DisablePAFXFAST(true))
	if err := cl.Login(); err != nil {
		return nil, fmt.Errorf("Kerberos: login as %s with keytab %s: %w", k.Principal, k.Keytab, err)
	}
	return cl, nil
}

// user is the HDFS user under simple authentication.
func (c *Config) user() (string, error) {
	if c.User != "" {
		return c.User, nil
	}
	if u := os.Getenv("HADOOP_USER_NAME"); u != "" {
		return u, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("%s not set and the OS user is unknown: %w", PropUser, err)
	}
	return u.Username, nil
}

// key identifies the client a Config needs: configs with equal keys share one.
func (c *Config) key() string {
	k := KerberosConfig{}
	if c.Kerberos != nil {
		k = *c.Kerberos
	}
	return strings.Join([]string{strings.Join(c.Namenodes, ","), c.User, k.Keytab, k.Principal,
		k.Krb5Conf, k.ServicePrincipal, c.DataTransferProtection, c.DialTimeout.String(), c.IOTimeout.String()}, "\x00")
}
