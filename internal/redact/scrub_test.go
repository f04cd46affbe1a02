package redact_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/floe-dev/floe/internal/redact"
)

// TestSecretsScrub checks every secret goes, in each form net/http sends
// user info in, and a secret holding another goes whole.
func TestSecretsScrub(t *testing.T) {
	s := append(redact.Secrets{"tok", "", "tok-s3cret"}, redact.Basic("floe", "pa55word")...)
	got := s.Scrub("Authorization: Basic ZmxvZTpwYTU1d29yZA== (floe:pa55word), Bearer tok-s3cret, tok")
	want := "Authorization: Basic REDACTED (floe:REDACTED), Bearer REDACTED, REDACTED"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Without a password, the name is the credential (https://KEY@host).
	if b := redact.Basic("k3y", ""); len(b) != 2 || b.Scrub("Basic azN5Og== k3y") != "Basic REDACTED REDACTED" {
		t.Errorf("a name without a password gave secrets %q, want it and its Basic form", b)
	}
	if b := redact.Basic("", ""); b != nil {
		t.Errorf("no user info gave secrets %q", b)
	}
}

// TestSecretsScrubJSONEscaped: a secret echoed in a JSON body with some of
// its characters escaped (PHP's \/, .NET's \u002B, either case of hex) is
// scrubbed too, whole, the text around it kept as it was. Before, only the
// verbatim form went, and the token was printed but for its escapes.
func TestSecretsScrubJSONEscaped(t *testing.T) {
	s := redact.Secrets{"Zm9v/YmFy+YmF6==", "pa55word"}
	for _, tc := range []struct{ in, want string }{
		{`{"auth":"Bearer Zm9v\/YmFy+YmF6=="}`, `{"auth":"Bearer REDACTED"}`},
		{`{"auth":"Zm9v/YmFy\u002BYmF6\u003d\u003D","x":"a\/b"}`, `{"auth":"REDACTED","x":"a\/b"}`},
		{`"pa55word" \"pa55\u0077ord\" Zm9v\/YmFy+YmF6== \u00e9`, `"REDACTED" \"REDACTED\" REDACTED \u00e9`},
		{`\u12 pa55wor\`, `\u12 pa55wor\`},
	} {
		if got := s.Scrub(tc.in); got != tc.want {
			t.Errorf("Scrub(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestSecretsError checks a scrubbed error keeps its chain, is cut after
// scrubbing at a UTF-8 boundary, and is err itself when nothing changed.
func TestSecretsError(t *testing.T) {
	s := redact.Secrets{"s3cret"}
	err := s.Error(fmt.Errorf("loading: token s3cret: %w", fs.ErrPermission), 0)
	if err.Error() != "loading: token REDACTED: permission denied" || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("got %v, want it scrubbed and still fs.ErrPermission", err)
	}
	err = s.Error(errors.New("é s3cret tail"), 11)
	if got := err.Error(); got != "é REDACTED..." {
		t.Errorf("got %q", got)
	}
	if got := s.Error(errors.New(strings.Repeat("é", 3)), 3); got.Error() != "é..." {
		t.Errorf("got %q, want a cut at a rune boundary", got)
	}
	plain := errors.New("nothing to hide")
	if got := s.Error(plain, 100); got != plain {
		t.Errorf("got %v, want the error itself", got)
	}
	if s.Error(nil, 10) != nil {
		t.Error("nil became an error")
	}
}
