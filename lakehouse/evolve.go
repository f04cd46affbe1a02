package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/schemas"
)

// ColumnConflictError is a schema change the table cannot make: the column
// exists with a type that is neither the wanted one nor promotable to it
// (another producer or member added it with another type, or the change
// narrows it), or a change to a column the table lacks.
type ColumnConflictError struct {
	Column string
	// Table is the column's type in the table (nil if it has none);
	// Wanted the type the change asked for (nil for MakeOptional).
	Table, Wanted iceberg.Type
	Detail        string
}

func (e *ColumnConflictError) Error() string {
	return "column " + e.Column + ": " + e.Detail
}

// firstMetadataColumn is the first of the Kafka metadata columns every
// floe table ends with; added columns go before it.
const firstMetadataColumn = "_kafka_topic"

// Evolve applies changes to the table's schema, the way a producer's new
// writer schema asks (schemas.EvolveRequest), and returns the table's
// resulting current schema. It is idempotent: each attempt reloads the
// table and plans against its current schema, so a change another member
// already made (the same column with the same type, or a wider one) is
// done, and concurrent evolutions of different columns both land. A column
// that exists with a type that cannot hold the wanted one is a
// *ColumnConflictError. The commit asserts the schema it planned against
// (iceberg-go's UpdateSchema adds AssertCurrentSchemaID) and is retried on
// conflict; data commits do not conflict with it, since the catalog applies
// each commit's updates to its current metadata.
func (t *Table) Evolve(ctx context.Context, changes []schemas.Change) (*iceberg.Schema, error) {
	t.evolveMu.Lock()
	defer t.evolveMu.Unlock()
	backoff := 20 * time.Millisecond
	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		tbl, err := t.Load(ctx)
		if err != nil {
			return nil, err
		}
		tx := tbl.NewTransaction()
		upd := tx.UpdateSchema(true, false)
		applied, err := planEvolution(tbl.Schema(), changes, upd)
		if err != nil {
			return nil, err
		}
		if len(applied) == 0 {
			return tbl.Schema(), nil
		}
		if err := upd.Commit(); err != nil {
			return nil, fmt.Errorf("evolving table %s (%s): %w", t.Name(), strings.Join(applied, ", "), err)
		}
		committed, err := tx.Commit(ctx)
		if err == nil {
			sc := committed.Schema()
			t.log.Info("table schema evolved", "table", t.Name(), "changes", strings.Join(applied, ", "), "schema_id", sc.ID)
			return sc, nil
		}
		// A conflict or an unknown outcome: the next attempt re-plans
		// against the reloaded table, which finds the changes made if
		// they were.
		lastErr = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t.log.Info("schema evolution did not commit, reloading", "table", t.Name(), "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
	return nil, fmt.Errorf("evolving table %s: gave up after %d attempts: %w", t.Name(), maxAttempts, lastErr)
}

// planEvolution stages on upd what changes still need of schema cur and
// describes each; nothing staged means the table already fits.
func planEvolution(cur *iceberg.Schema, changes []schemas.Change, upd *table.UpdateSchema) ([]string, error) {
	var applied []string
	added := map[string]bool{}
	for _, c := range changes {
		f, ok := cur.FindFieldByName(c.Column)
		switch c.Kind {
		case schemas.AddColumn:
			switch {
			case added[c.Column]:
				continue
			case !ok:
				added[c.Column] = true
				upd.AddColumn([]string{c.Column}, c.Type, c.Doc, false, nil)
				upd.MoveBefore([]string{c.Column}, []string{firstMetadataColumn})
				applied = append(applied, c.String())
				continue
			case schemas.SameShape(f.Type, c.Type) || schemas.Promotes(c.Type, f.Type):
				continue // added before, by this or another member
			}
			// The column exists: the change is a widening, or impossible.
			c.Kind = schemas.WidenColumn
			fallthrough
		case schemas.WidenColumn:
			switch {
			case !ok:
				return nil, &ColumnConflictError{Column: c.Column, Wanted: c.Type, Detail: "the table has no such column to widen"}
			case schemas.Promotes(c.Type, f.Type):
				continue // as wide already
			case !schemas.Promotes(f.Type, c.Type):
				return nil, &ColumnConflictError{Column: c.Column, Table: f.Type, Wanted: c.Type,
					Detail: fmt.Sprintf("the table's %s cannot hold the writer's %s (allowed: int → long, float → double, a larger decimal precision)", f.Type, c.Type)}
			}
			upd.UpdateColumn([]string{c.Column}, table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: c.Type}})
			applied = append(applied, schemas.Change{Kind: schemas.WidenColumn, Column: c.Column, Type: c.Type}.String()+" (was "+f.Type.String()+")")
		case schemas.MakeOptional:
			if !ok {
				return nil, &ColumnConflictError{Column: c.Column, Detail: "the table has no such column"}
			}
			if !f.Required {
				continue
			}
			for _, id := range cur.IdentifierFieldIDs {
				if id == f.ID {
					return nil, &ColumnConflictError{Column: c.Column, Table: f.Type, Detail: "is an identifier column and must stay required"}
				}
			}
			upd.UpdateColumn([]string{c.Column}, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true, Val: false}})
			applied = append(applied, c.String())
		default:
			return nil, fmt.Errorf("column %s: unknown schema change %d", c.Column, c.Kind)
		}
	}
	return applied, nil
}

// EvolveTo makes the table hold the rows of sc, a schema file that may
// have gained optional fields or wider types, or dropped fields (their
// columns are made optional), since the table was created: it applies
// those changes (logged) and returns sc adapted to the table's
// resulting schema (schemas.Schema.WithTable), the schema to build rows
// with. A field sc adds as required, or makes required, gets an optional
// column, but the result still refuses plain values without it. A change
// Iceberg cannot make (a narrowing, a type change that is
// not a promotion) is refused with an error naming the column and both
// types, before anything is consumed.
func (t *Table) EvolveTo(ctx context.Context, sc *schemas.Schema) (*schemas.Schema, error) {
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	changes, err := schemas.PlanTable(tbl.Schema(), sc)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.Name(), err)
	}
	cur := tbl.Schema()
	if len(changes) > 0 {
		if cur, err = t.Evolve(ctx, changes); err != nil {
			var ce *ColumnConflictError
			if errors.As(err, &ce) {
				return nil, fmt.Errorf("table %s: schema %s: %w", t.Name(), sc.Name, err)
			}
			return nil, err
		}
	}
	out, err := sc.WithTable(cur)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.Name(), err)
	}
	return out, nil
}

// alignToTable relabels the columns of rows with the field ids of the
// table's columns of the same name. A schema file's ids are positional:
// once the file gained a field, its ids differ from the table's, and
// iceberg-go, which matches columns by id, would write values into the
// wrong columns. floe matches columns by name everywhere, so rows built
// with any version of the file (replay) land where they belong. Columns
// whose physical types differ (an int the table widened to long) keep
// their data; the writer casts them. rows is not released.
func alignToTable(rows arrow.RecordBatch, ts *iceberg.Schema) (arrow.RecordBatch, error) {
	target, err := table.SchemaToArrowSchema(ts, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("converting the table's schema to Arrow: %w", err)
	}
	if rows.Schema().Equal(target) {
		rows.Retain()
		return rows, nil
	}
	fields := make([]arrow.Field, rows.NumCols())
	cols := make([]arrow.Array, rows.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, f := range rows.Schema().Fields() {
		idx := target.FieldIndices(f.Name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("column %q is not in the table; run floe run once to evolve it", f.Name)
		}
		tf := target.Field(idx[0])
		col := rows.Column(i)
		fields[i] = arrow.Field{Name: f.Name, Type: f.Type, Nullable: f.Nullable, Metadata: tf.Metadata}
		switch {
		case arrow.TypeEqual(f.Type, tf.Type, arrow.CheckMetadata()):
			col.Retain()
			cols[i] = col
		case arrow.TypeEqual(f.Type, tf.Type):
			// Same layout, other nested field ids: take the table's.
			fields[i].Type = tf.Type
			d := retype(col.Data(), tf.Type)
			cols[i] = array.MakeFromData(d)
			d.Release()
		case arrow.IsPrimitive(f.Type.ID()) || f.Type.ID() == arrow.DECIMAL128:
			col.Retain()
			cols[i] = col
		default:
			return nil, fmt.Errorf("column %q is %s in the rows but %s in the table", f.Name, f.Type, tf.Type)
		}
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rows.NumRows()), nil
}

// retype returns d as type dt, which has d's layout (nested field
// metadata may differ), sharing its buffers.
func retype(d arrow.ArrayData, dt arrow.DataType) arrow.ArrayData {
	children := d.Children()
	kids := make([]arrow.ArrayData, len(children))
	for i, c := range children {
		switch t := dt.(type) {
		case *arrow.StructType:
			kids[i] = retype(c, t.Field(i).Type)
		case *arrow.MapType:
			kids[i] = retype(c, t.Elem())
		case *arrow.ListType:
			kids[i] = retype(c, t.Elem())
		default:
			c.Retain()
			kids[i] = c
		}
	}
	out := array.NewData(dt, d.Len(), d.Buffers(), kids, d.NullN(), d.Offset())
	for _, k := range kids {
		k.Release()
	}
	return out
}
