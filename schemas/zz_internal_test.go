package schemas

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

func zzmsg(i int) []byte {
	const tmpl = `{"event_id":"%08x-7a4d-4c1e-9a53-0c6b1d2e3f40","session_id":"s-%07d","user_id":"u-%07d",` +
		`"event_type":"%s","url":"https://shop.example.com/p/%06d?q=%s","referrer":"https://www.google.com/",` +
		`"user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0",` +
		`"ts":%d,"seq":%d}`
	return []byte(fmt.Sprintf(tmpl, i, i/8, i/16, "click", i, strings.Repeat("x", 40), int64(1732860000000)+int64(i), i%8))
}

func zzsetup(b *testing.B) (*Builder, [][]byte) {
	s, _ := Lookup(Clickstream)
	bld := s.NewBuilder(memory.DefaultAllocator, 0)
	b.Cleanup(bld.Release)
	msgs := make([][]byte, 1024)
	for i := range msgs {
		msgs[i] = zzmsg(i)
	}
	return bld, msgs
}

func BenchmarkZZParse(b *testing.B) {
	bld, msgs := zzsetup(b)
	for i := 0; b.Loop(); i++ {
		bld.parser.ParseBytes(msgs[i%1024])
	}
}
func BenchmarkZZDecode(b *testing.B) {
	bld, msgs := zzsetup(b)
	for i := 0; b.Loop(); i++ {
		var r row
		if err := bld.decode(msgs[i%1024], &r); err != nil {
			b.Fatal(err)
		}
	}
}
func BenchmarkZZAppend(b *testing.B) {
	for _, batch := range []int{1024, 8192, 65536} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) {
			bld, msgs := zzsetup(b)
			m := Meta{Topic: "clicks", Partition: 3, Offset: 1, Timestamp: time.Now()}
			now := time.Now()
			for i := 0; b.Loop(); i++ {
				if err := bld.Append(msgs[i%1024], m, now, "ok"); err != nil {
					b.Fatal(err)
				}
				if bld.rows == batch {
					bld.NewRecord().Release()
				}
			}
		})
	}
}

func BenchmarkZZAppendNoRecord(b *testing.B) {
	bld, msgs := zzsetup(b)
	m := Meta{Topic: "clicks", Partition: 3, Offset: 1, Timestamp: time.Now()}
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		if err := bld.Append(msgs[i%1024], m, now, "ok"); err != nil {
			b.Fatal(err)
		}
		if bld.rows == 8192 {
			bld.reset()
		}
	}
}
