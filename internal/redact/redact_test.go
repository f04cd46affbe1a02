package redact_test

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/floe-dev/floe/internal/redact"
)

// TestURL checks that neither a password nor a query value survives, also
// in the URLs url.Parse refuses, which are the ones config errors quote,
// and that user info whose name is the credential (no password, or an
// empty one) is masked whole; before, the name was kept, and an empty
// password came out as "s3cret:REDACTED".
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://lookup.example.com/v1":                    "https://lookup.example.com/v1",
		"https://s3cret@lookup.example.com/v1":             "https://REDACTED@lookup.example.com/v1",
		"https://s3cret:@lookup.example.com/v1":            "https://REDACTED@lookup.example.com/v1",
		"https://floe:s3cret@lookup.example.com/v1":        "https://floe:REDACTED@lookup.example.com/v1",
		"http://h:81/l?api_key=s3cret&x=1&s3cret#frag":     "http://h:81/l?api_key=REDACTED&x=REDACTED&REDACTED",
		"https://floe:pa%ss-s3cret@catalog.example.com:81": "https://REDACTED@catalog.example.com:81",
		"https://floe:pa#ss-s3cret@catalog.example.com/p":  "https://REDACTED@catalog.example.com/p",
		"https://floe:pa/ss-s3cret@host/p?k=s3cret":        "https://REDACTED@host/p?REDACTED",
		"https://host:port/%zz?k=s3cret":                   "https://host:port/%zz?REDACTED",
		// No "//": the parser finds no user info, the password in the
		// path or the opaque part.
		"floe:s3cret@lookup.example.com/v1":        "REDACTED@lookup.example.com/v1",
		"https:floe:s3cret@lookup.example.com":     "REDACTED@lookup.example.com",
		"https:/floe:s3cret@lookup.example.com/v1": "REDACTED@lookup.example.com/v1",
		"https://host/users/a@b":                   "https://host/users/a@b",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}

// TestURLKeyValueConnectionString checks that a key/value connection
// string (libpq's, as a sql catalog's uri on PostgreSQL may be, or ADO's)
// comes back as written with its password values masked, quoted ones and
// ones holding a space or a ';' whole. Before, url.Parse took it for a
// path: the password was printed, the spaces escaped ("loading sql catalog
// host=127.0.0.1%20port=1%20user=floe%20password=PGPASS%20dbname=db").
func TestURLKeyValueConnectionString(t *testing.T) {
	for in, want := range map[string]string{
		"host=127.0.0.1 port=1 user=floe password=PGPASS dbname=db": "host=127.0.0.1 port=1 user=floe password=REDACTED dbname=db",
		"host=h password='a b\\' c' dbname=db":                      "host=h password=REDACTED dbname=db",
		"host=h password = 'unterminated dbname=db":                 "host=h password = REDACTED",
		"dbname=db sslpassword=k3y password=pa%ss":                  "dbname=db sslpassword=REDACTED password=REDACTED",
		"Server=h;User Id=sa;Password=pa ss;w0rd;Database=db":       "Server=h;User Id=sa;Password=REDACTED;Database=db",
		"server=h;pwd={a;}}b};database=db":                          "server=h;pwd=REDACTED;database=db",
		`Server=h;Password="a;""b";Database=db`:                     "Server=h;Password=REDACTED;Database=db",
		"host=h user=floe dbname=db":                                "host=h user=floe dbname=db",
		"file:/tmp/c.db?_auth_pass=s3cret":                          "file:/tmp/c.db?_auth_pass=REDACTED",
		"c.db?_pragma=busy_timeout(30000)":                          "c.db?_pragma=REDACTED",
		"postgres://floe:s3cret@h/db?password=s3cret":               "postgres://floe:REDACTED@h/db?password=REDACTED",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
	// The values as written and unquoted, as a driver may quote either.
	got := redact.KeyValueSecrets("host=h password='a \\'b' sslpassword=k3y")
	if want := (redact.Secrets{`'a \'b'`, "a 'b", "k3y"}); !slices.Equal(got, want) {
		t.Errorf("got secrets %q, want %q", got, want)
	}
	if got := redact.KeyValueSecrets("postgres://floe:s3cret@h/db"); got != nil {
		t.Errorf("a URL gave key/value secrets %q", got)
	}
}

// TestParseError checks that a parse error keeps its reason where the URL
// has no user info (the reason may quote part of a password otherwise).
func TestParseError(t *testing.T) {
	for in, want := range map[string]string{
		"https://floe:pa%ss-s3cret@host": `"https://REDACTED@host": not a valid URL`,
		"https://host:port/x?k=s3cret":   `"https://host:port/x?REDACTED": invalid port ":port" after host`,
	} {
		_, err := url.Parse(in)
		if got := redact.ParseError(in, err).Error(); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}

func TestRequestError(t *testing.T) {
	err := redact.RequestError(&url.Error{Op: "Get", URL: "http://h/m?token=s3cret", Err: url.InvalidHostError("x")})
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "http://h/m?token=REDACTED") {
		t.Errorf("got %v", err)
	}
}
