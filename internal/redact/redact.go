// Package redact prints the URLs of floe's configuration (enrichment
// service, REST catalog, schema registry, metrics endpoint) without the
// credentials they may carry: a user-info password (or a name alone, which
// is then the credential) or a token in the query.
package redact

import (
	"errors"
	"fmt"
	"net/url"
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
func URL(s string) string {
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
	if errors.As(err, &ue) && !strings.Contains(s, "@") {
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
