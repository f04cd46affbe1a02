package lakehouse

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Column names of the deterministic row id.
const (
	TopicColumn     = "_kafka_topic"
	PartitionColumn = "_kafka_partition"
	OffsetColumn    = "_kafka_offset"
)

// rangeFilter selects the rows of r. Planning a scan with it prunes every
// data file whose offset statistics do not overlap r, so a flush above the
// watermark (the normal case) opens no data file at all.
func rangeFilter(r Range) iceberg.BooleanExpression {
	return iceberg.NewAnd(
		iceberg.EqualTo(iceberg.Reference(TopicColumn), r.Topic),
		iceberg.EqualTo(iceberg.Reference(PartitionColumn), r.Partition),
		iceberg.GreaterThanEqual(iceberg.Reference(OffsetColumn), r.From),
		iceberg.LessThan(iceberg.Reference(OffsetColumn), r.To),
	)
}

// antiJoin is the insert-only dedupe MERGE: it returns the rows of rows whose
// (topic, partition, offset) is not yet in tbl, and how many data files it
// had to read to know. rows must all belong to r. The caller keeps ownership
// of rows; the result is a new reference.
func (t *Table) antiJoin(ctx context.Context, tbl *table.Table, r Range, rows arrow.RecordBatch) (arrow.RecordBatch, int, error) {
	present, scanned, err := existingOffsets(ctx, tbl, r)
	if err != nil {
		return nil, scanned, err
	}
	if len(present) == 0 {
		rows.Retain()
		return rows, scanned, nil
	}
	idx := rows.Schema().FieldIndices(OffsetColumn)
	if len(idx) != 1 {
		return nil, scanned, fmt.Errorf("rows have no %s column", OffsetColumn)
	}
	offs := rows.Column(idx[0]).(*array.Int64)
	keep := make([]bool, offs.Len())
	for i := range keep {
		_, dup := present[offs.Value(i)]
		keep[i] = !dup
	}
	out, err := filterRows(ctx, rows, keep)
	if err != nil {
		return nil, scanned, fmt.Errorf("filtering duplicates: %w", err)
	}
	return out, scanned, nil
}

// existingOffsets returns the offsets of r already in tbl, reading only the
// data files whose statistics overlap r.
func existingOffsets(ctx context.Context, tbl *table.Table, r Range) (map[int64]struct{}, int, error) {
	if tbl.CurrentSnapshot() == nil {
		return nil, 0, nil
	}
	scan := tbl.Scan(table.WithRowFilter(rangeFilter(r)), table.WithSelectedFields(withNested(tbl.Schema(), []string{OffsetColumn}, TopicColumn, PartitionColumn)...))
	tasks, err := scan.PlanFiles(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("planning scan of %s: %w", r, err)
	}
	if len(tasks) == 0 {
		return nil, 0, nil
	}
	_, batches, err := scan.ReadTasks(ctx, tasks)
	if err != nil {
		return nil, len(tasks), fmt.Errorf("reading %s: %w", r, err)
	}
	present := make(map[int64]struct{})
	for b, err := range batches {
		if err != nil {
			return nil, len(tasks), fmt.Errorf("reading %s: %w", r, err)
		}
		col, ok := b.Column(b.Schema().FieldIndices(OffsetColumn)[0]).(*array.Int64)
		if !ok {
			b.Release()
			return nil, len(tasks), fmt.Errorf("reading %s: %s is not int64", r, OffsetColumn)
		}
		for i := 0; i < col.Len(); i++ {
			present[col.Value(i)] = struct{}{}
		}
		b.Release()
	}
	return present, len(tasks), nil
}

// withNested returns the columns a scan selects, plus every top-level
// column of sch with a nested type (struct, list, map) when a selected or
// filtered column comes after such a column.
// iceberg-go v0.7.0 misreads a filtered scan that selects or filters on a
// column placed after a nested one unless the nested ones are selected too
// (the record filter is bound to the wrong columns: "referenced field was
// int64, but should have been utf8").
func withNested(sch *iceberg.Schema, selected []string, filtered ...string) []string {
	fields := sch.Fields()
	firstNested := len(fields)
	for i, f := range fields {
		if _, nested := f.Type.(iceberg.NestedType); nested {
			firstNested = i
			break
		}
	}
	after := false
	for i, f := range fields {
		if i > firstNested && (slices.Contains(selected, f.Name) || slices.Contains(filtered, f.Name)) {
			after = true
		}
	}
	if !after {
		return selected
	}
	out := slices.Clone(selected)
	for _, f := range fields {
		if _, nested := f.Type.(iceberg.NestedType); nested && !slices.Contains(out, f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// filterRows returns the rows of rows whose mask entry is true.
func filterRows(ctx context.Context, rows arrow.RecordBatch, mask []bool) (arrow.RecordBatch, error) {
	b := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(mask, nil)
	m := b.NewArray()
	defer m.Release()
	return compute.FilterRecordBatch(ctx, rows, m, compute.DefaultFilterOptions())
}
