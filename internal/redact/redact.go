// Package redact prints the URLs of floe's configuration (enrichment
// service, REST catalog, schema registry, metrics endpoint, a sql
// catalog's uri) without the credentials they may carry: a user-info
// password (or a name alone, which is then the credential), a token in the
// query, or the password of a key/value connection string.
package redact

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a redacted password or query value.
const Mask = "REDACTED"

// URL returns s with its user-info password and the values of its query
// replaced by Mask, and without its fragment. User info without a password
// (or with an empty one) is masked whole: net/http sends it as Basic
// credentials, and an API key passed as https://KEY@host or
// https://KEY:@host is the name. When s does not parse (a
// password holding a '%' not followed by two hex digits, a '#' or a '/'),
// everything between "://" and the last '@' is masked, and so is the
// query: the parser's idea of where the user info ends is then not to be
// trusted, and a '@' in a path only costs the host being masked too. So
// is a URL with a '@' and no host (no "//": "user:pw@host/v1",
// "https:/user:pw@host"), which parses, the user info in its path or
// opaque part.
//
// A s that is not a URL but a connection string of key=value pairs
// (libpq's "host=h user=u password=pw", ADO's "server=h;password=pw"), as
// a sql catalog's uri may be, is returned as written with the values of
// its password keys masked (see keyValues); url.Parse took it for a path,
// kept the password and escaped the spaces.
func URL(s string) string {
	if isKeyValues(s) {
		masked, _ := keyValues(s)
		return masked
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" && strings.Contains(s, "@") {
		return unparsed(s)
	}
	c := *u
	if c.User != nil {
		if pw, _ := c.User.Password(); pw != "" {
			c.User = url.UserPassword(c.User.Username(), Mask)
		} else {
			c.User = url.User(Mask)
		}
	}
	c.RawQuery = query(c.RawQuery)
	c.ForceQuery = false
	c.Fragment, c.RawFragment = "", ""
	return c.String()
}

// query masks each value of a raw query, keeping the names (and a
// parameter without '=', which may be a token alone, is masked whole).
func query(raw string) string {
	if raw == "" {
		return ""
	}
	params := strings.Split(raw, "&")
	for i, p := range params {
		if name, _, ok := strings.Cut(p, "="); ok {
			params[i] = name + "=" + Mask
		} else if p != "" {
			params[i] = Mask
		}
	}
	return strings.Join(params, "&")
}

func unparsed(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = Mask + rest[at:]
	}
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		rest = rest[:q] + "?" + Mask
	}
	if !ok {
		return rest
	}
	return scheme + "://" + rest
}

// ParseError is url.Parse's err for s told without s: the *url.Error quotes
// s whole, and its reason may quote part of a password (an invalid escape
// or port), so the reason is kept only where s has no user info.
func ParseError(s string, err error) error {
	reason := "not a valid URL"
	var ue *url.Error
	if errors.As(err, &ue) && !strings.Contains(s, "@") && !isKeyValues(s) {
		reason = ue.Err.Error()
	}
	return fmt.Errorf("%q: %s", URL(s), reason)
}

// RequestError is err, an http.Client error, with the URL it names
// redacted (net/http masks only a user-info password, not the query).
func RequestError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: URL(ue.URL), Err: ue.Err}
}

// KeyValueSecrets returns the values URL masks in s, a key/value
// connection string, as written and unquoted (a driver may quote either);
// nil when s is not one.
func KeyValueSecrets(s string) Secrets {
	if !isKeyValues(s) {
		return nil
	}
	_, secrets := keyValues(s)
	return secrets
}

// keyStart is a key/value pair's start: a key (a name, ADO's may hold
// spaces: "user id") and '='.
var keyStart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_. -]*=`)

// isKeyValues reports whether s is a key/value connection string rather
// than a URL or a path: no "://" and a key and '=' first ("file:x.db?a=b",
// "dir/x.db" and "host:1/p?a=b" are not).
func isKeyValues(s string) bool {
	return !strings.Contains(s, "://") && keyStart.MatchString(strings.TrimLeft(s, " \t\r\n;"))
}

// keyValues returns s with the values of its password keys (any key
// holding "pass" or "secret" or "token", and ODBC's pwd, case aside)
// replaced by Mask, and those values. A value quoted in ' or " (libpq's
// '...' with backslash escapes, ADO's doubled quotes) or ODBC's braces
// ends at its closing quote, the rest of s when there is none; any other
// value ends where a separator (white space or ';') is followed by the
// next key and '=', or at the end: a password holding a space or a ';'
// goes whole.
func keyValues(s string) (string, Secrets) {
	var b strings.Builder
	var secrets Secrets
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		key := strings.ToLower(strings.Trim(s[i:i+eq], " \t\r\n;"))
		b.WriteString(s[i : i+eq+1])
		i += eq + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			b.WriteByte(s[i])
			i++
		}
		end, unquoted := value(s, i)
		if v := s[i:end]; v != "" && (strings.Contains(key, "pass") || strings.Contains(key, "secret") || strings.Contains(key, "token") || key == "pwd") {
			b.WriteString(Mask)
			secrets = append(secrets, v)
			if unquoted != v && unquoted != "" {
				secrets = append(secrets, unquoted)
			}
		} else {
			b.WriteString(v)
		}
		i = end
	}
	return b.String(), secrets
}

// value returns the end of the value starting at s[i] and the value
// without its quotes.
func value(s string, i int) (end int, unquoted string) {
	if i == len(s) {
		return i, ""
	}
	closing := map[byte]byte{'\'': '\'', '"': '"', '{': '}'}[s[i]]
	if closing == 0 {
		for j := i; j < len(s); j++ {
			if (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n' || s[j] == ';') &&
				keyStart.MatchString(strings.TrimLeft(s[j:], " \t\r\n;")) {
				return j, s[i:j]
			}
		}
		return len(s), s[i:]
	}
	var u strings.Builder
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && closing == '\'' && j+1 < len(s):
			j++
			u.WriteByte(s[j])
		case s[j] == closing && j+1 < len(s) && s[j+1] == closing:
			j++
			u.WriteByte(s[j])
		case s[j] == closing:
			return j + 1, u.String()
		default:
			u.WriteByte(s[j])
		}
	}
	return len(s), u.String()
}
