package lakehouse

import (
	"context"
	"iter"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/internal/redact"
)

// catalogSecrets are the credentials among a catalog's properties: the
// token, the secret of an OAuth2 credential ("id:secret", or the secret
// alone), the values of header.* (sent as headers), the uri's password
// (sent as Basic by net/http), the password of a key/value uri (a sql
// catalog's "host=h password=pw") and any property named as a secret
// (s3.secret-access-key, s3.session-token, ...). The bearer tokens a REST
// catalog's client obtains with credential are not among the properties:
// see sentTokens.
func catalogSecrets(p iceberg.Properties) redact.Secrets {
	var s redact.Secrets
	for k, v := range p {
		name := strings.ToLower(k)
		switch {
		case v == "":
		case name == "credential":
			_, secret, ok := strings.Cut(v, ":")
			if !ok {
				secret = v
			}
			s = append(s, secret)
		case strings.HasPrefix(name, "header."), strings.Contains(name, "token"), strings.Contains(name, "secret"), strings.Contains(name, "password"):
			s = append(s, v)
		}
	}
	if u, err := url.Parse(p["uri"]); err == nil && u.User != nil {
		pass, _ := u.User.Password()
		s = append(s, redact.Basic(u.User.Username(), pass)...)
	}
	return append(s, redact.KeyValueSecrets(p["uri"])...)
}

// maxSentTokens bounds sentTokens: enough for the token being refreshed
// while requests made with the previous ones are answered.
const maxSentTokens = 8

// sentTokens are the last bearer tokens a REST catalog's client sent
// (originGuard records each request's): with credential, iceberg-go
// exchanges the secret for an access token at the OAuth2 endpoint, and
// refreshes it, and a catalog echoing the Authorization it got quotes that
// token, as good as the secret for its lifetime. A nil *sentTokens holds
// none.
type sentTokens struct {
	mu     sync.Mutex
	tokens []string // the latest last
}

// add records the token of authorization, an Authorization header's
// value, when it is a bearer token.
func (t *sentTokens) add(authorization string) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if t == nil || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.tokens); n > 0 && t.tokens[n-1] == token {
		return
	}
	t.tokens = slices.DeleteFunc(t.tokens, func(s string) bool { return s == token })
	if len(t.tokens) == maxSentTokens {
		t.tokens = slices.Delete(t.tokens, 0, 1)
	}
	t.tokens = append(t.tokens, token)
}

// with returns s and the tokens sent so far.
func (t *sentTokens) with(s redact.Secrets) redact.Secrets {
	if t == nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Concat(s, t.tokens)
}

// scrubCatalog is a catalog whose errors are scrubbed of its credentials:
// a REST catalog (or the gateway in front of it) may echo the token it got
// into its error message, an OAuth2 server the client secret into its
// error_description, and iceberg-go puts them into its errors as they
// come, which floe exits with and logs at every retried flush. The errors
// keep their chain (errors.Is finds iceberg-go's sentinels). The tables it
// returns commit through it, and their file systems' errors (a REST
// catalog's vended credentials refreshed at the catalog) are scrubbed too.
type scrubCatalog struct {
	catalog.Catalog
	secrets redact.Secrets
	tokens  *sentTokens // a REST catalog's, else nil
}

func (c scrubCatalog) scrub(err error) error {
	if err == nil {
		return nil
	}
	return c.tokens.with(c.secrets).Error(err, 0)
}

// own makes tbl commit through c.
func (c scrubCatalog) own(tbl *table.Table, err error) (*table.Table, error) {
	if err != nil {
		return nil, c.scrub(err)
	}
	fsF := func(ctx context.Context) (icebergio.IO, error) {
		fsys, err := tbl.FS(ctx)
		return fsys, c.scrub(err)
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), fsF, c), nil
}

func (c scrubCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	return c.own(c.Catalog.CreateTable(ctx, ident, sc, opts...))
}

func (c scrubCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	md, loc, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
	return md, loc, c.scrub(err)
}

func (c scrubCatalog) ListTables(ctx context.Context, ns table.Identifier) iter.Seq2[table.Identifier, error] {
	return func(yield func(table.Identifier, error) bool) {
		for id, err := range c.Catalog.ListTables(ctx, ns) {
			if !yield(id, c.scrub(err)) {
				return
			}
		}
	}
}

func (c scrubCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return c.own(c.Catalog.LoadTable(ctx, ident))
}

func (c scrubCatalog) DropTable(ctx context.Context, ident table.Identifier) error {
	return c.scrub(c.Catalog.DropTable(ctx, ident))
}

func (c scrubCatalog) RenameTable(ctx context.Context, from, to table.Identifier) (*table.Table, error) {
	return c.own(c.Catalog.RenameTable(ctx, from, to))
}

func (c scrubCatalog) CheckTableExists(ctx context.Context, ident table.Identifier) (bool, error) {
	ok, err := c.Catalog.CheckTableExists(ctx, ident)
	return ok, c.scrub(err)
}

func (c scrubCatalog) ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error) {
	ns, err := c.Catalog.ListNamespaces(ctx, parent)
	return ns, c.scrub(err)
}

func (c scrubCatalog) CreateNamespace(ctx context.Context, ns table.Identifier, props iceberg.Properties) error {
	return c.scrub(c.Catalog.CreateNamespace(ctx, ns, props))
}

func (c scrubCatalog) DropNamespace(ctx context.Context, ns table.Identifier) error {
	return c.scrub(c.Catalog.DropNamespace(ctx, ns))
}

func (c scrubCatalog) CheckNamespaceExists(ctx context.Context, ns table.Identifier) (bool, error) {
	ok, err := c.Catalog.CheckNamespaceExists(ctx, ns)
	return ok, c.scrub(err)
}

func (c scrubCatalog) LoadNamespaceProperties(ctx context.Context, ns table.Identifier) (iceberg.Properties, error) {
	p, err := c.Catalog.LoadNamespaceProperties(ctx, ns)
	return p, c.scrub(err)
}

func (c scrubCatalog) UpdateNamespaceProperties(ctx context.Context, ns table.Identifier, removals []string, updates iceberg.Properties) (catalog.PropertiesUpdateSummary, error) {
	s, err := c.Catalog.UpdateNamespaceProperties(ctx, ns, removals, updates)
	return s, c.scrub(err)
}

// Close closes the catalog underneath, when it has resources to release.
func (c scrubCatalog) Close() error {
	if cl, ok := c.Catalog.(interface{ Close() error }); ok {
		return c.scrub(cl.Close())
	}
	return nil
}
