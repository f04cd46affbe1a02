package redact_test

import (
	"net/url"
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
