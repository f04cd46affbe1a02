package lakehouse

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// TestRowStoreSpills: a rowStore gives back each partition's rows sorted
// by offset, duplicates included, whether they stayed in memory or went to
// its file, holding at most its budget, or one partition's rows, in memory
// once the adds are finished; its file is unlinked from the start, so
// nothing is left behind however the process ends.
func TestRowStoreSpills(t *testing.T) {
	const budget = 100
	for _, finish := range []bool{false, true} {
		rnd := rand.New(rand.NewPCG(1, 2))
		want := map[int32][]verifyRow{}
		s := newRowStore(budget)
		for i := range 3001 {
			p := int32(rnd.IntN(5))
			if i == 3000 {
				p = 9 // after the last spill: only in memory, unless finished
			}
			v := verifyRow{part: p, sess: uint32(rnd.IntN(50)), off: int64(rnd.IntN(1000)), seq: rnd.Int64()}
			if i%7 == 0 {
				v.sess = noSession
			}
			want[p] = append(want[p], v)
			if err := s.add(v); err != nil {
				t.Fatal(err)
			}
		}
		if s.f == nil {
			t.Fatal("3001 rows with a budget of 100 did not spill")
		}
		if _, err := os.Stat(s.f.Name()); !os.IsNotExist(err) {
			t.Fatalf("spill file %s is still linked: %v", s.f.Name(), err)
		}
		if s.inMem != 1 {
			t.Fatalf("%d rows in memory after 30 spills of 100, want 1", s.inMem)
		}
		if finish {
			if err := s.finish(); err != nil {
				t.Fatal(err)
			}
			if s.inMem != 0 {
				t.Fatalf("%d rows in memory once finished, want 0", s.inMem)
			}
		}
		s.peak = 0
		if got := slices.Sorted(maps.Keys(s.partitions())); !slices.Equal(got, []int32{0, 1, 2, 3, 4, 9}) {
			t.Fatalf("partitions %v", got)
		}
		largest := 0
		for p, rows := range want {
			largest = max(largest, len(rows))
			got, err := s.take(p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(got, byOffset) {
				t.Fatalf("partition %d: rows not sorted by offset", p)
			}
			order := func(a, b verifyRow) int {
				return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.sess, b.sess), cmp.Compare(a.seq, b.seq))
			}
			slices.SortFunc(got, order)
			slices.SortFunc(rows, order)
			if !slices.Equal(got, rows) {
				t.Fatalf("partition %d: %d rows back, want %d (or different ones)", p, len(got), len(rows))
			}
		}
		if limit := largest + s.budget*map[bool]int{false: 1, true: 0}[finish]; s.peak > limit {
			t.Errorf("finished %v: held %d rows at once while taking partitions, want at most %d", finish, s.peak, limit)
		}
		if len(s.partitions()) != 0 || s.inMem != 0 {
			t.Errorf("after taking every partition: %d left, %d rows in memory", len(s.partitions()), s.inMem)
		}
		if err := s.close(); err != nil {
			t.Fatal(err)
		}
	}
}
