package schemas_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/floe-dev/floe/schemas"
)

// FuzzAppend feeds arbitrary bytes, as a network peer could, to a Builder
// that is reused across inputs. Whatever the input, Append must not panic,
// must fail only with a *DecodeError, must leave the columns of equal length,
// and must never store a row that breaks the schema's rules.
func FuzzAppend(f *testing.F) {
	for _, seed := range []string{
		string(message(1, 333)),
		`{"session_id":"s","event_type":"e","ts":1}`,
		`{"session_id":"s","event_type":"e","ts":"2024-11-29T06:00:00.5+05:30","seq":null,"url":null}`,
		`{"session_id":"s\u00e9\"","event_type":"e","ts":-1,"x":{"y":[1,{"z":null}]},"seq":9223372036854775807}`,
		`{"session_id":"s","session_id":"t","event_type":"e","ts":1}`,
		`{"session_id":"","event_type":"e","ts":1}`,
		`{"session_id":1,"event_type":"e","ts":1}`,
		`{"session_id":"s","event_type":"e","ts":1.5}`,
		`{"session_id":"s","event_type":"e","ts":"nope"}`,
		`{"session_id":"s","event_type":"e","ts":9223372036854775807}`,
		`{"session_id":"s","event_type":"e","ts":1,"seq":"1"}`,
		"{\"session_id\":\"\xff\",\"event_type\":\"e\",\"ts\":1}",
		`{"session_id":"s","event_type":"e"}`,
		`{}`, `[]`, `null`, `"x"`, `1e400`, `NaN`, `{`, `{"a":`, ``, " ",
		`{"session_id":"s","event_type":"e","ts":1} {}`,
	} {
		f.Add([]byte(seed))
	}

	_, b, _ := newBuilder(f, 4096)
	good := message(0, 333)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := b.Append(good, testMeta(1), testIngested, "ok"); err != nil {
			t.Fatalf("good message rejected: %v", err)
		}
		err := b.Append(data, testMeta(2), testIngested, "")
		var de *schemas.DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("Append(%q) = %v (%T), want nil or *DecodeError", data, err, err)
		}
		if de != nil && (de.Reason == "" || de.Detail == "" || len(de.Detail) > 256 || !utf8.ValidString(de.Detail)) {
			t.Fatalf("Append(%q) = %#v: reason or detail empty, over 256 bytes or not UTF-8", data, de)
		}
		wantRows := int64(2)
		if err != nil {
			wantRows = 1
		}
		if int64(b.Len()) != wantRows {
			t.Fatalf("Len = %d, want %d (err %v)", b.Len(), wantRows, err)
		}

		rec := b.NewRecord()
		defer rec.Release()
		if rec.NumRows() != wantRows {
			t.Fatalf("record has %d rows, want %d", rec.NumRows(), wantRows)
		}
		checkColumns(t, rec)
		for c, col := range rec.Columns() {
			field := rec.Schema().Field(c)
			if err := array.ValidateFull(col); err != nil {
				t.Fatalf("column %s is not valid Arrow: %v", field.Name, err)
			}
			if !field.Nullable && col.NullN() != 0 {
				t.Fatalf("required column %s has nulls", field.Name)
			}
			s, ok := col.(*array.String)
			if !ok {
				continue
			}
			for i := range s.Len() {
				if s.IsValid(i) && !utf8.ValidString(s.Value(i)) {
					t.Fatalf("column %s row %d is not UTF-8: %q", field.Name, i, s.Value(i))
				}
			}
		}
		if err == nil {
			v := rowValues(t, rec, 1)
			if v[1] == "" || v[3] == "" {
				t.Fatalf("Append(%q) stored an empty required string: %v", data, v)
			}
		}
	})
}
