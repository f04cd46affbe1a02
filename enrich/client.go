package enrich

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/internal/redact"
)

// maxResponseBytes bounds one response body; a larger one is a permanent
// error rather than a way to exhaust memory.
const maxResponseBytes = 64 << 20

// RequestError is a failed lookup request: Result.Err for StatusError and
// StatusDead results after a request failed. Its message never contains the
// auth header's value.
type RequestError struct {
	// StatusCode is the HTTP status, or 0 for a transport error or a timeout.
	StatusCode int
	// Retryable reports whether the failure was one that is retried
	// (transport errors, timeouts, 429, 5xx except 501).
	Retryable bool
	// Attempts is the number of attempts made.
	Attempts int
	// RetryAfter is how long a 429 or 503 asked to wait (its Retry-After,
	// at most maxRetryAfter); 0 when it did not say.
	RetryAfter time.Duration
	msg        string
}

// maxRetryAfter caps the wait a Retry-After asks for: a service that asks
// for an hour still gets asked again within a minute (a lane under pause
// would otherwise stand still that long on one header).
const maxRetryAfter = time.Minute

// retryAfter reads a Retry-After header, delay-seconds or an HTTP date, as
// a wait from now (0 when absent, unreadable or past), capped at
// maxRetryAfter.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(h, 10, 64); err == nil {
		d = time.Duration(min(max(secs, 0), int64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

func (e *RequestError) Error() string {
	if e.Attempts > 1 {
		return fmt.Sprintf("enrichment lookup: %s (after %d attempts)", e.msg, e.Attempts)
	}
	return "enrichment lookup: " + e.msg
}

// client speaks the lookup contract (see the package documentation).
type client struct {
	http      *http.Client
	transport *http.Transport
	mode      string
	url       string
	dec       *decoder
	parsers   fastjson.ParserPool
	// decodeSlots bounds the bodies parsed at once (see decode).
	decodeSlots chan struct{}
	bufs        sync.Pool // *bytes.Buffer for response bodies
	authName    string
	authValue   string
	// shownURL is the URL as errors name it: redacted, {key} as written.
	shownURL string
	// secrets are what scrub removes: the auth header's value, the Basic
	// credentials of the URL's user info and the values of its query, each
	// as a server may echo them.
	secrets []string
}

func newClient(cfg *Config, badAttr func(string)) (*client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Every request slot may hold a connection; keep them all alive between
	// requests rather than re-dialling (and re-handshaking TLS).
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = max(cfg.MaxInFlightRequests, 2)
	t.IdleConnTimeout = 90 * time.Second
	tc, err := tlsConfig(cfg.TLS)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		t.TLSClientConfig = tc
	}
	c := &client{
		// A redirect is not followed: it would send the auth header (and
		// the keys) wherever the server points, a custom header to any
		// host and Authorization over plain http on the same host.
		http: &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		transport: t,
		mode:      cfg.Mode,
		url:       cfg.URL,
		shownURL:  redactURL(cfg.URL),
		dec:       newDecoder(cfg.Fields, badAttr),

		decodeSlots: make(chan struct{}, runtime.GOMAXPROCS(0)),
	}
	if cfg.AuthHeader != "" {
		c.authName, c.authValue, err = parseAuthHeader(cfg.AuthHeader)
		if err != nil {
			return nil, fmt.Errorf("enrich.auth_header: %w", err)
		}
		c.secrets = append(c.secrets, c.authValue)
		if _, cred, ok := strings.Cut(c.authValue, " "); ok {
			c.secrets = append(c.secrets, strings.TrimSpace(cred))
		}
	}
	if u, err := url.Parse(strings.ReplaceAll(cfg.URL, "{key}", "k")); err == nil {
		// net/http sends a URL's user info as "Authorization: Basic
		// base64(user:password)", with or without a password; without one
		// (or with an empty one, curl's -u KEY:) the name is the credential.
		if u.User != nil {
			pw, _ := u.User.Password()
			basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pw))
			c.secrets = append(c.secrets, "Basic "+basic, basic, pw)
			if pw == "" {
				c.secrets = append(c.secrets, u.User.Username())
			}
		}
		// A server echoes the request's URL in a redirect's Location (an
		// http to https upgrade keeps the query) or in an error body, its
		// query's values raw or decoded.
		for p := range strings.SplitSeq(u.RawQuery, "&") {
			_, v, ok := strings.Cut(p, "=")
			if !ok {
				v = p // a parameter without '=' may be a token alone
			}
			c.secrets = append(c.secrets, v)
			if dv, err := url.QueryUnescape(v); err == nil {
				c.secrets = append(c.secrets, dv)
			}
		}
	}
	// The credentials alone shorter than minSecret would match ordinary
	// text (an empty one, everywhere); the auth header's value is scrubbed
	// whatever its length.
	c.secrets = slices.DeleteFunc(c.secrets, func(s string) bool { return s == "" || (s != c.authValue && len(s) < minSecret) })
	return c, nil
}

func tlsConfig(c TLSConfig) (*tls.Config, error) {
	if c == (TLSConfig{}) {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in, warned about
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("enrich.tls.ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("enrich.tls.ca_file: %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("enrich.tls.cert_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// lookup makes one attempt for keys. It returns the attributes of the keys
// the service knows; a key absent from the map is a miss.
func (c *client) lookup(ctx context.Context, keys []string) (map[string]Values, error) {
	var req *http.Request
	var err error
	if c.mode == ModeSingle {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, strings.ReplaceAll(c.url, "{key}", escapeKey(keys[0])), nil)
	} else {
		var body []byte
		body, err = json.Marshal(struct {
			Keys []string `json:"keys"`
		}{keys})
		if err == nil {
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
			if req != nil {
				req.Header.Set("Content-Type", "application/json")
			}
		}
	}
	if err != nil {
		return nil, c.fail(0, false, "building the request: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.authName != "" {
		req.Header.Set(c.authName, c.authValue)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound && c.mode == ModeSingle:
		drain(resp.Body)
		return nil, nil // a miss
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		drain(resp.Body)
		return nil, c.fail(resp.StatusCode, false, "%s answered %s to %q: floe does not follow redirects, which would send the auth header elsewhere; set enrich.url to where it points",
			req.Method, resp.Status, redactURL(resp.Header.Get("Location")))
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, snippetRead))
		drain(resp.Body)
		code := resp.StatusCode
		retryable := code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented)
		e := c.fail(code, retryable, "%s answered %s%s", req.Method, resp.Status, c.snippet(body, len(body) == snippetRead))
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return nil, e
	}
	buf, _ := c.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() {
		if buf.Cap() <= 4<<20 { // do not pin a huge body
			buf.Reset()
			c.bufs.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes+1)); err != nil {
		return nil, c.transportError(err)
	}
	if buf.Len() > maxResponseBytes {
		return nil, c.fail(resp.StatusCode, false, "response larger than %d bytes", maxResponseBytes)
	}
	return c.decode(keys, buf.Bytes())
}

// decode parses a 200 response. Attribute strings are copied out of the
// parser's buffer, so the result outlives it.
//
// The parser builds every JSON value of the body, about 100 bytes each: a
// body of small values ("[0,0,…]") costs 50 times its size, so a bound on
// bytes alone would let one answer take gigabytes. So the values are
// counted first (maxValues), and at most GOMAXPROCS bodies are parsed at
// once (parsing is CPU work: waiting costs no time).
func (c *client) decode(keys []string, raw []byte) (map[string]Values, error) {
	n := jsonValues(raw)
	if limit := maxValues(len(keys)); n > limit {
		return nil, c.fail(http.StatusOK, false, "decoding the response: %d JSON values for %d key(s), above the %d floe parses (%d a key and %d)",
			n, len(keys), limit, valuesPerKey, baseValues)
	}
	c.decodeSlots <- struct{}{}
	defer func() { <-c.decodeSlots }()
	p := c.parsers.Get()
	defer func() {
		if n <= baseValues { // a parser keeps the values of its largest body
			c.parsers.Put(p)
		}
	}()
	v, err := p.ParseBytes(raw)
	if err != nil {
		// Not fastjson's message: it quotes the body's two ends around
		// "...", which can cut an echoed secret into halves scrub misses.
		return nil, c.fail(http.StatusOK, false, "decoding the response: not JSON%s", c.snippet(raw[:min(len(raw), snippetRead)], len(raw) > snippetRead))
	}
	if c.mode == ModeSingle {
		if v.Type() == fastjson.TypeNull {
			return nil, nil
		}
		return map[string]Values{keys[0]: c.dec.attrs(v)}, nil
	}
	var results *fastjson.Value
	if top, err := v.Object(); err == nil {
		results = lastMember(top, "results")
	}
	if results == nil || results.Type() != fastjson.TypeObject {
		return nil, c.fail(http.StatusOK, false, `decoding the response: no "results" object`)
	}
	o, _ := results.Object()
	out := make(map[string]Values, o.Len())
	o.Visit(func(k []byte, rv *fastjson.Value) {
		if rv.Type() != fastjson.TypeNull {
			out[string(k)] = c.dec.attrs(rv)
		} else {
			delete(out, string(k)) // a repeated key counts by its last value
		}
	})
	return out, nil
}

// A response may hold baseValues JSON values and valuesPerKey a key asked:
// attributes far beyond what a lookup needs, about 55 MiB parsed for a
// batch of 500 keys. A larger one is a permanent failure of the request;
// under policy pause its batch is then split (see Stage.resolve), down to
// one key and baseValues + valuesPerKey values.
const (
	baseValues   = 64 << 10
	valuesPerKey = 1 << 10
)

func maxValues(keys int) int { return baseValues + keys*valuesPerKey }

// jsonValues is an upper bound on the number of values in the JSON text
// raw: one for the text, one more after each comma and each opening
// bracket or brace outside strings (a long text attribute full of commas
// is one value).
func jsonValues(raw []byte) int {
	n := 1
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case ',', '[', '{':
			n++
		case '"':
			// To the closing quote: past each escaped character, and
			// to the end of a string left open.
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		}
	}
	return n
}

// transportError classifies a failure below HTTP: certificate problems are
// permanent, everything else (refused, reset, timeout) is retryable.
func (c *client) transportError(err error) error {
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	permanent := errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie)
	// A *url.Error quotes the request's URL whole, its query included;
	// net/http hides only a user-info password.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = &url.Error{Op: ue.Op, URL: c.shownURL, Err: ue.Err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return c.fail(0, true, "timed out: %v", err)
	}
	return c.fail(0, !permanent, "%v", err)
}

// fail builds a RequestError, with the secrets scrubbed from
// anything the server or the transport echoed.
func (c *client) fail(code int, retryable bool, format string, args ...any) *RequestError {
	return &RequestError{StatusCode: code, Retryable: retryable, Attempts: 1, msg: c.scrub(fmt.Sprintf(format, args...), false)}
}

// snippetRead is how much of an error response's body is read, and
// snippetShown how much of it an error shows.
const (
	snippetRead  = 4 << 10
	snippetShown = 256
)

// snippet is ": " and the start of body for an error, or "" for an empty
// body. Callers pass more of the body than is shown (up to snippetRead;
// cut when there was more), so that an echoed secret is scrubbed whole
// before the snippet is cut.
func (c *client) snippet(body []byte, cut bool) string {
	s := strings.TrimSpace(truncate(c.scrub(string(body), cut), snippetShown))
	if s == "" {
		return ""
	}
	return ": " + s
}

// scrub replaces the secrets in s (see client.secrets), also JSON-escaped
// (redact.Secrets.Scrub). When s was cut (a body read to its limit), an end
// of s that begins a secret is dropped as well.
func (c *client) scrub(s string, cut bool) string {
	s = redact.Secrets(c.secrets).Scrub(s)
	if cut {
		for _, secret := range c.secrets {
			for n := min(len(secret)-1, len(s)); n >= minSecret; n-- {
				if strings.HasSuffix(s, secret[:n]) {
					s = s[:len(s)-n] + redact.Mask
					break
				}
			}
		}
	}
	return s
}

// minSecret is the shortest part of a secret scrub looks for alone:
// shorter ones would match ordinary text.
const minSecret = 8

// truncate cuts s to at most n bytes, at a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (c *client) closeIdle() { c.transport.CloseIdleConnections() }

// drain reads what is left of a body (bounded) so the connection can be
// reused.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10)) }

// escapeKey percent-encodes everything but RFC 3986 unreserved characters,
// so a key is safe both in a path segment and in a query string.
func escapeKey(k string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		ch := k[i]
		if 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}
