package lakehouse

import (
	"context"
	"fmt"
	"iter"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// serialCatalog makes one call at a time to a catalog that is not safe for
// concurrent use: iceberg-go's Hive catalog holds one Thrift connection,
// whose client is not, and floe calls a table's catalog from the flusher,
// maintenance and schema evolution at once — concurrent calls read one
// another's answers, then all wait for ever. Thrift also ignores the
// context, so a call runs in its own goroutine: the caller returns when
// its context ends, the call keeping the catalog until it does (the calls
// after it then fail at their deadlines rather than hang). The tables it
// returns commit through it.
type serialCatalog struct {
	catalog.Catalog
	turn chan struct{} // holds a token while a call runs
}

func newSerialCatalog(c catalog.Catalog) *serialCatalog {
	return &serialCatalog{Catalog: c, turn: make(chan struct{}, 1)}
}

// serially runs f alone, until ctx ends.
func serially[T any](ctx context.Context, c *serialCatalog, f func() (T, error)) (T, error) {
	var zero T
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return zero, fmt.Errorf("catalog busy with a call that has not returned: %w", ctx.Err())
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-c.turn }()
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("catalog did not answer: %w", ctx.Err())
	}
}

// own makes tbl commit through c.
func (c *serialCatalog) own(tbl *table.Table, err error) (*table.Table, error) {
	if err != nil {
		return nil, err
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil
}

func (c *serialCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	return c.own(serially(ctx, c, func() (*table.Table, error) { return c.Catalog.CreateTable(ctx, ident, sc, opts...) }))
}

func (c *serialCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	type out struct {
		md  table.Metadata
		loc string
	}
	o, err := serially(ctx, c, func() (out, error) {
		md, loc, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
		return out{md, loc}, err
	})
	return o.md, o.loc, err
}

// ListTables collects the list in one call: an iterator would hold the
// catalog while its caller works.
func (c *serialCatalog) ListTables(ctx context.Context, ns table.Identifier) iter.Seq2[table.Identifier, error] {
	type entry struct {
		id  table.Identifier
		err error
	}
	all, _ := serially(ctx, c, func() ([]entry, error) {
		var out []entry
		for id, err := range c.Catalog.ListTables(ctx, ns) {
			out = append(out, entry{id, err})
		}
		return out, nil
	})
	return func(yield func(table.Identifier, error) bool) {
		if all == nil && ctx.Err() != nil {
			yield(nil, ctx.Err())
			return
		}
		for _, e := range all {
			if !yield(e.id, e.err) {
				return
			}
		}
	}
}

func (c *serialCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return c.own(serially(ctx, c, func() (*table.Table, error) { return c.Catalog.LoadTable(ctx, ident) }))
}

func (c *serialCatalog) DropTable(ctx context.Context, ident table.Identifier) error {
	_, err := serially(ctx, c, func() (struct{}, error) { return struct{}{}, c.Catalog.DropTable(ctx, ident) })
	return err
}

func (c *serialCatalog) RenameTable(ctx context.Context, from, to table.Identifier) (*table.Table, error) {
	return c.own(serially(ctx, c, func() (*table.Table, error) { return c.Catalog.RenameTable(ctx, from, to) }))
}

func (c *serialCatalog) CheckTableExists(ctx context.Context, ident table.Identifier) (bool, error) {
	return serially(ctx, c, func() (bool, error) { return c.Catalog.CheckTableExists(ctx, ident) })
}

func (c *serialCatalog) ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error) {
	return serially(ctx, c, func() ([]table.Identifier, error) { return c.Catalog.ListNamespaces(ctx, parent) })
}

func (c *serialCatalog) CreateNamespace(ctx context.Context, ns table.Identifier, props iceberg.Properties) error {
	_, err := serially(ctx, c, func() (struct{}, error) { return struct{}{}, c.Catalog.CreateNamespace(ctx, ns, props) })
	return err
}

func (c *serialCatalog) DropNamespace(ctx context.Context, ns table.Identifier) error {
	_, err := serially(ctx, c, func() (struct{}, error) { return struct{}{}, c.Catalog.DropNamespace(ctx, ns) })
	return err
}

func (c *serialCatalog) CheckNamespaceExists(ctx context.Context, ns table.Identifier) (bool, error) {
	return serially(ctx, c, func() (bool, error) { return c.Catalog.CheckNamespaceExists(ctx, ns) })
}

func (c *serialCatalog) LoadNamespaceProperties(ctx context.Context, ns table.Identifier) (iceberg.Properties, error) {
	return serially(ctx, c, func() (iceberg.Properties, error) { return c.Catalog.LoadNamespaceProperties(ctx, ns) })
}

func (c *serialCatalog) UpdateNamespaceProperties(ctx context.Context, ns table.Identifier, removals []string, updates iceberg.Properties) (catalog.PropertiesUpdateSummary, error) {
	return serially(ctx, c, func() (catalog.PropertiesUpdateSummary, error) {
		return c.Catalog.UpdateNamespaceProperties(ctx, ns, removals, updates)
	})
}

// Close closes the catalog underneath, when it has resources to release.
func (c *serialCatalog) Close() error {
	if cl, ok := c.Catalog.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}
