package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// catalogCallTimeout bounds each table load, commit and creation, the
// namespace calls of a creation and a REST catalog's opening (a variable
// for tests). iceberg-go's REST client has no timeout of its own:
// a catalog that takes requests and never answers held a flush, a replay
// or maintenance forever, its files growing older than the orphan age. A
// commit cut off this way is an unknown outcome: looked for by its id, its
// files kept.
var catalogCallTimeout = 2 * time.Minute

// boundedCatalog is a catalog whose table loads, commits and creations,
// and the namespace calls a creation makes, get at most catalogCallTimeout
// each; the tables it returns commit through it.
type boundedCatalog struct{ catalog.Catalog }

func (c boundedCatalog) CheckNamespaceExists(ctx context.Context, ns table.Identifier) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	return c.Catalog.CheckNamespaceExists(ctx, ns)
}

func (c boundedCatalog) CreateNamespace(ctx context.Context, ns table.Identifier, props iceberg.Properties) error {
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	return c.Catalog.CreateNamespace(ctx, ns, props)
}

func (c boundedCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil
}

func (c boundedCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	tbl, err := c.Catalog.CreateTable(ctx, ident, sc, opts...)
	if err != nil {
		return nil, err
	}
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil
}

func (c boundedCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogCallTimeout)
	defer cancel()
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// Close closes the catalog underneath, when it has resources to release.
func (c boundedCatalog) Close() error {
	if cl, ok := c.Catalog.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// errReportedConflict marks a conflict a catalog reported through
// keepFilesCatalog; isConflict reads it as a conflict.
var errReportedConflict = errors.New("catalog reported a conflict")

// keepFilesCatalog is a catalog whose commit conflicts do not read as
// table.ErrCommitFailed. iceberg-go takes that error for proof that nothing
// was committed, and its manifest rewrite then deletes the manifests it
// merged; but a catalog may report a conflict for a commit it applied (AWS's
// client resends a Glue UpdateTable whose answer was lost), and the head
// would then name deleted manifests. Any other error is an unknown outcome
// to iceberg-go, which keeps every file and does not retry: the caller looks
// for its commit id, and after a conflict that did not apply the files are
// orphans for a later run.
type keepFilesCatalog struct{ catalog.Catalog }

func (c keepFilesCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	meta, loc, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
	if errors.Is(err, table.ErrCommitFailed) {
		// Not wrapped: errors.Is would find ErrCommitFailed down the chain.
		err = fmt.Errorf("%w: %v", errReportedConflict, err)
	}
	return meta, loc, err
}

// keepingFiles returns tbl bound to t's catalog wrapped in keepFilesCatalog,
// for a transaction whose files iceberg-go deletes after ErrCommitFailed.
func (t *Table) keepingFiles(tbl *table.Table) *table.Table {
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, keepFilesCatalog{t.cat})
}
