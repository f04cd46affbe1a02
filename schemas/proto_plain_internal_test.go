package schemas

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// plainPayments writes the payments .proto (importing the well-known
// Timestamp) to a directory and returns its path.
func plainPayments(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "payments.proto")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlainProtobufMatchesJSON: payments as plain Protobuf values (no
// wire-format framing), with the message type named in the configuration,
// become exactly the rows their JSON form becomes; malformed bytes are
// dead letters (malformed_value).
func TestPlainProtobufMatchesJSON(t *testing.T) {
	sc := loadPayments(t)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, paymentsProto), Message: "com.example.payments.Payment"}})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := compileProto(1, paymentsProto)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Payment")
	var js, pb [][]byte
	for _, p := range testPayments() {
		pb = append(pb, protoPayment(t, md, p))
		if p.metadata == nil {
			p.metadata = map[string]string{} // a Protobuf map is never null
		}
		js = append(js, p.json())
	}
	if want, got := build(t, sc, js), build(t, psc, pb); !array.RecordEqual(want, got) {
		t.Fatalf("Protobuf rows differ from JSON rows:\n%v\n%v", got, want)
	}

	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	good := pb[0]
	// (Cutting a marshaled message is no good: its field order is not fixed,
	// so a cut may fall between fields.)
	for _, bad := range [][]byte{{0xff, 0xff, 0xff}, append(good[:len(good):len(good)], 0x7d, 0x00), append([]byte{0x0a, 0x80}, good...)} {
		var de *DecodeError
		if err := b.Append(bad, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonMalformedValue {
			t.Errorf("Append(% x) = %v, want a malformed_value DecodeError", bad, err)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("%d rows from malformed values", b.Len())
	}
}

// TestPlainProtobufConfigErrors: a missing file or message, and a message
// whose field cannot fill its column, are refused when the job starts.
func TestPlainProtobufConfigErrors(t *testing.T) {
	sc := loadPayments(t)
	good := plainPayments(t, paymentsProto)
	wrongType := plainPayments(t, strings.Replace(paymentsProto, "string amount = 2;", "double amount = 2;", 1))
	for _, c := range []struct {
		f    Format
		want string
	}{
		{Format{Kind: FormatProtobuf}, "set proto.file"},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: good, Message: "com.example.payments.Nope"}}, `proto.message "com.example.payments.Nope": no such message`},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: good + ".missing", Message: "x.Y"}}, "proto.file"},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: wrongType, Message: "com.example.payments.Payment"}}, `field "amount": the writer's double cannot be stored in a column of type decimal(18, 2)`},
		{Format{Kind: FormatAvro, Proto: &ProtoConfig{File: good, Message: "com.example.payments.Payment"}}, "goes with format protobuf"},
	} {
		if _, err := sc.WithFormat(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.f, err, c.want)
		}
	}
}

// FuzzProtobufPlain: any bytes given to the plain Protobuf decoder are a
// row or a *DecodeError, never a panic, and a failed one appends nothing.
func FuzzProtobufPlain(f *testing.F) {
	sc := loadPaymentsTB(f)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(f, paymentsProto), Message: "com.example.payments.Payment"}})
	if err != nil {
		f.Fatal(err)
	}
	fd, err := compileProto(1, paymentsProto)
	if err != nil {
		f.Fatal(err)
	}
	md := fd.Messages().ByName("Payment")
	for _, p := range testPayments()[:4] {
		v := protoPayment(f, md, p)
		f.Add(v)
		f.Add(v[:len(v)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	f.Cleanup(b.Release)
	f.Fuzz(func(t *testing.T, data []byte) {
		before := b.Len()
		err := b.Append(data, Meta{Topic: "p"}, plainTime, "")
		var de *DecodeError
		switch {
		case err == nil:
			if b.Len() != before+1 {
				t.Fatalf("Append(% x) succeeded with %d rows, want %d", data, b.Len(), before+1)
			}
		case errors.As(err, &de):
			if b.Len() != before {
				t.Fatalf("Append(% x) failed (%v) but appended", data, err)
			}
		default:
			t.Fatalf("Append(% x) = %v, want nil or *DecodeError", data, err)
		}
		if b.Len() > 1000 {
			b.NewRecord().Release()
		}
	})
}

// plainTime is the ingestion time of the rows these tests build.
var plainTime = time.Date(2024, 12, 1, 0, 0, 0, 0, time.UTC)

func loadPaymentsTB(tb testing.TB) *Schema {
	tb.Helper()
	sc, err := Lookup("examples/payments.avsc")
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}
