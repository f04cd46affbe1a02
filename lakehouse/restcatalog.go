package lakehouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/floe-dev/floe/internal/redact"
)

// isREST reports whether catalog.Load would pick iceberg-go's REST catalog
// for p: it is registered as rest, http and https, and a uri's scheme
// stands for a missing type.
func isREST(p iceberg.Properties) bool {
	typ := strings.ToLower(p["type"])
	if typ == "" {
		typ, _, _ = strings.Cut(strings.ToLower(p["uri"]), "://")
	}
	return typ == "rest" || typ == "http" || typ == "https"
}

// openREST loads a REST catalog whose client sends requests only to the
// origin (scheme, host and port) of uri and of oauth2-server-uri.
// iceberg-go's session transport adds the token (or the OAuth2 bearer, or a
// SigV4 signature) to every request, including those Go's http.Client makes
// to follow a redirect, so a 3xx from the catalog, a proxy in front of it or
// whoever answers an http:// uri sent table.catalog.token to any host it
// named, https or not. The bearer tokens the client sends are recorded in
// tokens.
func openREST(ctx context.Context, name string, p iceberg.Properties, tokens *sentTokens) (catalog.Catalog, error) {
	uri, err := url.Parse(p["uri"])
	if err != nil {
		return nil, fmt.Errorf("uri %w", redact.ParseError(p["uri"], err))
	}
	allowed := []string{origin(uri)}
	extra := iceberg.Properties{}
	for k, v := range p {
		if v != "" && k != "uri" && k != "type" {
			extra[k] = v
		}
	}
	opts := []rest.Option{rest.WithAdditionalProps(extra), rest.WithTransportFactory(func(tc *tls.Config) (http.RoundTripper, func()) {
		t := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc} // as iceberg-go's own
		return originGuard{t, allowed, tokens}, t.CloseIdleConnections
	})}
	// rest.NewCatalog reads the properties only after GET /v1/config; those
	// the client needs for that first request are given as options too, as
	// catalog.Load's path reads them before it.
	for key, opt := range map[string]func(string) rest.Option{
		"token": rest.WithOAuthToken, "credential": rest.WithCredential, "warehouse": rest.WithWarehouseLocation,
		"scope": rest.WithScope, "audience": rest.WithAudience, "resource": rest.WithResource,
	} {
		if v := p[key]; v != "" {
			opts = append(opts, opt(v))
		}
	}
	if v, ok := p["rest.tls.skip-verify"]; ok {
		opts = append(opts, rest.WithTLSConfig(&tls.Config{InsecureSkipVerify: strings.EqualFold(v, "true")})) //nolint:gosec // opt-in, warned about
	}
	if strings.EqualFold(p["rest.sigv4-enabled"], "true") {
		opts = append(opts, rest.WithSigV4RegionSvc(p["rest.signing-region"], p["rest.signing-name"]))
	}
	key := "oauth2-server-uri" // preferred over its alias, as iceberg-go does
	if p[key] == "" {
		key = "rest.authorization-url"
	}
	if raw := p[key]; raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%s %w", key, redact.ParseError(raw, err))
		}
		if u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("%s %q: want an absolute URL", key, redact.URL(raw))
		}
		allowed = append(allowed, origin(u))
		opts = append(opts, rest.WithAuthURI(u))
	}
	// Its GET /v1/config has no timeout of its own either.
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	return rest.NewCatalog(ctx, name, p["uri"], opts...)
}

// originGuard refuses requests to any origin but those allowed, and
// records the bearer token of those it sends in tokens (every request of
// the catalog's client comes here, its OAuth2 token requests included,
// after iceberg-go's session has set the Authorization header).
type originGuard struct {
	http.RoundTripper
	allowed []string
	tokens  *sentTokens
}

func (g originGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if o := origin(r.URL); !slices.Contains(g.allowed, o) {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, also on errors
		}
		return nil, fmt.Errorf("refusing a request to %s: the catalog's credentials go only to %s (a redirect, or the catalog's own config, points elsewhere; set table.catalog.uri to where it points)",
			o, strings.Join(g.allowed, " and "))
	}
	g.tokens.add(r.Header.Get("Authorization"))
	return g.RoundTripper.RoundTrip(r)
}

// origin is u's scheme, host and port (the scheme's default when absent),
// lower-cased: what a credential is bound to.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// warnInsecureREST logs, as the catalog is opened, REST settings that give
// its credentials away: a certificate not checked hands them to whoever
// answers the TLS handshake, plain http to whoever is on the path.
func warnInsecureREST(log *slog.Logger, p map[string]string) {
	if !isREST(p) {
		return
	}
	if strings.EqualFold(p["rest.tls.skip-verify"], "true") {
		log.Warn("table.catalog rest.tls.skip-verify is on: the catalog's certificate is not checked, so whoever answers the TLS handshake receives its token or credential (and the tables' metadata)")
	}
	creds := p["token"] != "" || p["credential"] != ""
	for _, key := range []string{"uri", "oauth2-server-uri", "rest.authorization-url"} {
		if u, err := url.Parse(p[key]); err == nil && u.Scheme == "http" && (creds || u.User != nil) {
			log.Warn("table.catalog credentials (token, credential or user info) are sent over plain http; use https:// outside a trusted network", "key", "table.catalog."+key)
		}
	}
}

// Denied reports whether err is a refusal that retrying does not clear
// until someone grants access: the table's files not writable by the job's
// user (fs.ErrPermission), or a REST catalog answering 401 or 403.
func Denied(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, rest.ErrForbidden) || errors.Is(err, rest.ErrUnauthorized)
}
