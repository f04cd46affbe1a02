package redact

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strconv"
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
// Mask, the longest first, so that a secret holding another goes whole;
// also where text escapes some of a secret's characters as JSON does, as a
// server's JSON error body echoing it would (PHP's json_encode writes / as
// \/, .NET's System.Text.Json + as \u002B).
func (s Secrets) Scrub(text string) string {
	sorted := slices.SortedFunc(slices.Values(s), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, secret := range sorted {
		if secret != "" {
			text = strings.ReplaceAll(text, secret, Mask)
		}
	}
	if strings.IndexByte(text, '\\') >= 0 {
		text = scrubEscaped(text, sorted)
	}
	return text
}

// scrubEscaped replaces the spans of text that read as one of secrets once
// unescaped (see unescape) by Mask.
func scrubEscaped(text string, secrets []string) string {
	plain, at := unescape(text)
	var spans [][2]int
	for _, secret := range secrets {
		for i := 0; secret != ""; {
			j := strings.Index(plain[i:], secret)
			if j < 0 {
				break
			}
			spans = append(spans, [2]int{at[i+j], at[i+j+len(secret)]})
			i += j + len(secret)
		}
	}
	if len(spans) == 0 {
		return text
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		if sp[0] < last { // overlaps the span masked before
			last = max(last, sp[1])
			continue
		}
		b.WriteString(text[last:sp[0]])
		b.WriteString(Mask)
		last = sp[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// unescape undoes text's JSON escapes of ASCII characters (\/, \\, \" and
// \uXXXX below U+0080; the others stay as they are) and returns with it,
// for each of its bytes, where in text the character it came from starts,
// and len(text) after its last.
func unescape(text string) (string, []int) {
	plain := make([]byte, 0, len(text))
	at := make([]int, 0, len(text)+1)
	for i := 0; i < len(text); {
		c, n := text[i], 1
		if c == '\\' && i+1 < len(text) {
			switch text[i+1] {
			case '/', '\\', '"':
				c, n = text[i+1], 2
			case 'u':
				if i+6 <= len(text) {
					if v, err := strconv.ParseUint(text[i+2:i+6], 16, 16); err == nil && v < utf8.RuneSelf {
						c, n = byte(v), 6
					}
				}
			}
		}
		plain = append(plain, c)
		at = append(at, i)
		i += n
	}
	return string(plain), append(at, len(text))
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
