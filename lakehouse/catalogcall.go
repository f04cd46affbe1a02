package lakehouse

import (
	"context"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// catalogCallTimeout bounds each table load, commit and creation (a
// variable for tests). iceberg-go's REST client has no timeout of its own:
// a catalog that takes requests and never answers held a flush, a replay
// or maintenance forever, its files growing older than the orphan age. A
// commit cut off this way is an unknown outcome: looked for by its id, its
// files kept.
var catalogCallTimeout = 2 * time.Minute

// boundedCatalog is a catalog whose loads, commits and creations get at
// most catalogCallTimeout each; the tables it returns commit through it.
type boundedCatalog struct{ catalog.Catalog }

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
