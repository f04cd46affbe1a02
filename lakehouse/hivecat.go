package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"sync"
	"syscall"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/thrift/lib/go/thrift"
)

// serialCatalog makes one call at a time to a catalog that is not safe for
// concurrent use: iceberg-go's Hive catalog holds one Thrift connection,
// whose client is not, and floe calls a table's catalog from the flusher,
// maintenance and schema evolution at once — concurrent calls read one
// another's answers, then all wait for ever. A call runs in its own
// goroutine and the caller returns when its context ends; the call itself
// ends within hiveReadTimeout of that (openHive), its connection then
// dropped. The tables it returns commit through it.
//
// That one connection is dialed when the catalog is opened, never again:
// once the metastore dropped it (a restart, a failover behind a virtual
// IP), every call failed for as long as floe ran. A call that fails for a
// lost connection closes the catalog, and the next call opens a new one
// (reopen).
type serialCatalog struct {
	catalog.Catalog // the first one opened, for what is not a call
	reopen          func(context.Context) (catalog.Catalog, error)
	turn            chan struct{} // holds a token while a call runs
	mu              sync.Mutex
	cur             catalog.Catalog // what calls go to; nil once its connection was lost
}

func newSerialCatalog(c catalog.Catalog, reopen func(context.Context) (catalog.Catalog, error)) *serialCatalog {
	return &serialCatalog{Catalog: c, reopen: reopen, turn: make(chan struct{}, 1), cur: c}
}

// serially runs f alone on the current catalog, until ctx ends, or at most
// catalogCallTimeout when ctx has no deadline: f is given that context, and
// a call reads its answer only until its deadline (openHive; without one,
// Thrift gave up at the first read timeout).
func serially[T any](ctx context.Context, c *serialCatalog, f func(context.Context, catalog.Catalog) (T, error)) (T, error) {
	var zero T
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, catalogCallTimeout)
		defer cancel()
	}
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
		cat, err := c.current(ctx)
		if err != nil {
			done <- result{zero, err}
			return
		}
		v, err := f(ctx, cat)
		if connectionLost(err) {
			c.mu.Lock()
			if c.cur == cat {
				c.cur = nil
				_ = closeCatalog(cat)
			}
			c.mu.Unlock()
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("catalog did not answer: %w", ctx.Err())
	}
}

// current returns the catalog calls go to, opening a new one when the
// last one's connection was lost. Only a call holding the turn opens one.
func (c *serialCatalog) current(ctx context.Context) (catalog.Catalog, error) {
	c.mu.Lock()
	cat := c.cur
	c.mu.Unlock()
	if cat != nil {
		return cat, nil
	}
	cat, err := c.reopen(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconnecting to the catalog: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = cat
	return cat, nil
}

// connectionLost reports whether err says the catalog's connection is
// gone or no longer usable (closed by the other side, reset, a network
// error, a stream out of step), not an answer.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var te thrift.TTransportException
	var pe thrift.TProtocolException
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne) || errors.As(err, &te) || errors.As(err, &pe)
}

// closeCatalog closes cat when it has resources to release.
func closeCatalog(cat catalog.Catalog) error {
	if cl, ok := cat.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// own makes tbl commit through c.
func (c *serialCatalog) own(tbl *table.Table, err error) (*table.Table, error) {
	if err != nil {
		return nil, err
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil
}

func (c *serialCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	return c.own(serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (*table.Table, error) {
		return cat.CreateTable(ctx, ident, sc, opts...)
	}))
}

func (c *serialCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	type out struct {
		md  table.Metadata
		loc string
	}
	o, err := serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (out, error) {
		md, loc, err := cat.CommitTable(ctx, ident, reqs, updates)
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
	all, err := serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) ([]entry, error) {
		var out []entry
		for id, err := range cat.ListTables(ctx, ns) {
			out = append(out, entry{id, err})
		}
		return out, nil
	})
	return func(yield func(table.Identifier, error) bool) {
		if err != nil {
			yield(nil, err)
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
	return c.own(serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (*table.Table, error) { return cat.LoadTable(ctx, ident) }))
}

func (c *serialCatalog) DropTable(ctx context.Context, ident table.Identifier) error {
	_, err := serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (struct{}, error) {
		return struct{}{}, cat.DropTable(ctx, ident)
	})
	return err
}

func (c *serialCatalog) RenameTable(ctx context.Context, from, to table.Identifier) (*table.Table, error) {
	return c.own(serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (*table.Table, error) {
		return cat.RenameTable(ctx, from, to)
	}))
}

func (c *serialCatalog) CheckTableExists(ctx context.Context, ident table.Identifier) (bool, error) {
	return serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (bool, error) { return cat.CheckTableExists(ctx, ident) })
}

func (c *serialCatalog) ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error) {
	return serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) ([]table.Identifier, error) {
		return cat.ListNamespaces(ctx, parent)
	})
}

func (c *serialCatalog) CreateNamespace(ctx context.Context, ns table.Identifier, props iceberg.Properties) error {
	_, err := serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (struct{}, error) {
		return struct{}{}, cat.CreateNamespace(ctx, ns, props)
	})
	return err
}

func (c *serialCatalog) DropNamespace(ctx context.Context, ns table.Identifier) error {
	_, err := serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (struct{}, error) {
		return struct{}{}, cat.DropNamespace(ctx, ns)
	})
	return err
}

func (c *serialCatalog) CheckNamespaceExists(ctx context.Context, ns table.Identifier) (bool, error) {
	return serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (bool, error) { return cat.CheckNamespaceExists(ctx, ns) })
}

func (c *serialCatalog) LoadNamespaceProperties(ctx context.Context, ns table.Identifier) (iceberg.Properties, error) {
	return serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (iceberg.Properties, error) {
		return cat.LoadNamespaceProperties(ctx, ns)
	})
}

func (c *serialCatalog) UpdateNamespaceProperties(ctx context.Context, ns table.Identifier, removals []string, updates iceberg.Properties) (catalog.PropertiesUpdateSummary, error) {
	return serially(ctx, c, func(ctx context.Context, cat catalog.Catalog) (catalog.PropertiesUpdateSummary, error) {
		return cat.UpdateNamespaceProperties(ctx, ns, removals, updates)
	})
}

// Close closes the catalog underneath, when it has resources to release:
// a call still under way then fails.
func (c *serialCatalog) Close() error {
	c.mu.Lock()
	cat := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cat == nil {
		return nil
	}
	return closeCatalog(cat)
}
