package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/floe-dev/floe/schemas"
)

var extraCols = []schemas.Column{
	{Name: "segment", Type: iceberg.PrimitiveTypes.String},
	{Name: "visits", Type: iceberg.PrimitiveTypes.Int64},
	{Name: "score", Type: iceberg.PrimitiveTypes.Float64},
	{Name: "vip", Type: iceberg.PrimitiveTypes.Bool},
	{Name: "signup_ts", Type: iceberg.PrimitiveTypes.TimestampTz},
}

func TestWithColumnsRoundTrip(t *testing.T) {
	s, err := clickstream(t).WithColumns(extraCols)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.Iceberg.Fields()); got != 15+len(extraCols) {
		t.Fatalf("%d fields", got)
	}
	if f, _ := s.Iceberg.FindFieldByName("signup_ts"); f.ID != 20 || f.Required {
		t.Fatalf("signup_ts field %+v, want optional id 20", f)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := s.NewBuilder(mem, 0)
	defer b.Release()
	signup := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	rows := [][]schemas.Attr{
		{schemas.StringAttr("gold"), schemas.LongAttr(42), schemas.DoubleAttr(0.5), schemas.BoolAttr(true), schemas.TimeAttr(signup)},
		nil, // not enriched: all null
		{schemas.StringAttr("silver"), {}, {}, schemas.BoolAttr(false)}, // unset and short: nulls
	}
	for i, extra := range rows {
		if err := b.AppendEnriched(message(i, 333), testMeta(int64(i)), testIngested, "ok", schemas.NewExtra(extra)); err != nil {
			t.Fatal(err)
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	col := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
	seg := rec.Column(col("segment")).(*array.String)
	visits := rec.Column(col("visits")).(*array.Int64)
	score := rec.Column(col("score")).(*array.Float64)
	vip := rec.Column(col("vip")).(*array.Boolean)
	ts := rec.Column(col("signup_ts")).(*array.Timestamp)
	if seg.Value(0) != "gold" || visits.Value(0) != 42 || score.Value(0) != 0.5 || !vip.Value(0) || int64(ts.Value(0)) != signup.UnixMicro() {
		t.Fatalf("row 0: %q %d %v %v %v", seg.Value(0), visits.Value(0), score.Value(0), vip.Value(0), ts.Value(0))
	}
	for _, c := range []int{col("segment"), col("visits"), col("score"), col("vip"), col("signup_ts")} {
		if !rec.Column(c).IsNull(1) {
			t.Fatalf("row 1 column %d not null", c)
		}
	}
	if seg.Value(2) != "silver" || !visits.IsNull(2) || !score.IsNull(2) || vip.IsNull(2) || vip.Value(2) || !ts.IsNull(2) {
		t.Fatalf("row 2: wrong values or nulls")
	}
}

func TestWithColumnsRejects(t *testing.T) {
	for _, tc := range []struct {
		cols []schemas.Column
		want string
	}{
		{[]schemas.Column{{Name: "session_id", Type: iceberg.PrimitiveTypes.String}}, `column "session_id" collides with enrichment column "session_id"`},
		{[]schemas.Column{{Name: "_kafka_offset", Type: iceberg.PrimitiveTypes.Int64}}, "already exists"},
		{[]schemas.Column{{Name: "", Type: iceberg.PrimitiveTypes.String}}, "no name"},
		{[]schemas.Column{{Name: "d", Type: iceberg.PrimitiveTypes.Date}}, "not supported"},
		{[]schemas.Column{{Name: "a", Type: iceberg.PrimitiveTypes.String}, {Name: "a", Type: iceberg.PrimitiveTypes.Int64}}, "already exists"},
	} {
		if _, err := clickstream(t).WithColumns(tc.cols); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WithColumns(%v) = %v, want an error with %q", tc.cols, err, tc.want)
		}
	}
}

// TestWithColumnsRefusesCaseCollisions: an extra column whose name differs
// only in case from one of the schema's, a metadata column or an earlier
// extra column is refused, naming both. They were compared exactly, and
// the table made was one Spark (case-insensitive by default) and Trino
// (which lower-cases names) cannot read.
func TestWithColumnsRefusesCaseCollisions(t *testing.T) {
	str := iceberg.PrimitiveTypes.String
	for _, tc := range []struct {
		cols []schemas.Column
		want string
	}{
		{[]schemas.Column{{Name: "Session_Id", Type: str}}, `column "Session_Id" differs from column "session_id" only in case`},
		{[]schemas.Column{{Name: "USER_ID", Type: str}}, `column "USER_ID" differs from column "user_id" only in case`},
		{[]schemas.Column{{Name: "_ENRICH_STATUS", Type: str}}, `column "_ENRICH_STATUS" differs from column "_enrich_status" only in case`},
		{[]schemas.Column{{Name: "_Kafka_Offset", Type: iceberg.PrimitiveTypes.Int64}}, `column "_Kafka_Offset" differs from column "_kafka_offset" only in case`},
		{[]schemas.Column{{Name: "segment", Type: str}, {Name: "Segment", Type: str}}, `column "Segment" differs from column "segment" only in case`},
	} {
		if _, err := clickstream(t).WithColumns(tc.cols); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WithColumns(%v) = %v, want an error with %q", tc.cols, err, tc.want)
		}
	}
}
