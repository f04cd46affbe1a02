package redact

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strings"
	"unicode/utf8"
)

// Secrets are credentials floe sends to a server, to be scrubbed from what
// the server (or a proxy, or the library talking to it) says back: a
// registry's 401 quoting the Authorization it got, a catalog's error
// message quoting the token. Empty ones are ignored.
type Secrets []string

// Basic returns the forms in which net/http sends user and password
// ("Authorization: Basic base64(user:password)"), the password alone
// included, as a server may echo either. Without a password the name is
// the credential (an API key passed as https://KEY@host or KEY:@host), and
// it is among them; without either, none.
func Basic(user, password string) Secrets {
	if user == "" && password == "" {
		return nil
	}
	secret := password
	if password == "" {
		secret = user
	}
	return Secrets{base64.StdEncoding.EncodeToString([]byte(user + ":" + password)), secret}
}

// Scrub returns text with every occurrence of each secret replaced by
// Mask, the longest first, so that a secret holding another goes whole.
func (s Secrets) Scrub(text string) string {
	sorted := slices.SortedFunc(slices.Values(s), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, secret := range sorted {
		if secret != "" {
			text = strings.ReplaceAll(text, secret, Mask)
		}
	}
	return text
}

// Error returns err with its message scrubbed and, with max > 0, cut to at
// most max bytes (after scrubbing: a cut never leaves part of a secret).
// errors.Is and errors.As still see err's chain; what errors.As finds
// there is not scrubbed, so only the returned error's message is to be
// shown.
func (s Secrets) Error(err error, max int) error {
	if err == nil {
		return nil
	}
	msg := s.Scrub(err.Error())
	if max > 0 && len(msg) > max {
		for max > 0 && !utf8.RuneStart(msg[max]) {
			max--
		}
		msg = msg[:max] + "..."
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

// scrubbed is an error shown as msg that unwraps to err.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
