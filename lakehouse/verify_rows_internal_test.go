package lakehouse

import (
	"cmp"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// TestRowStoreSpills: a rowStore gives back each partition's rows sorted
// by offset, duplicates included, whether they stayed in memory or went to
// its files, holding at most its budget plus one partition's rows in
// memory; close removes its files.
func TestRowStoreSpills(t *testing.T) {
	const budget = 100
	old := verifySpillRows
	verifySpillRows = budget
	t.Cleanup(func() { verifySpillRows = old })

	rnd := rand.New(rand.NewPCG(1, 2))
	want := map[int32][]verifyRow{}
	s := newRowStore()
	for i := range 3001 {
		p := int32(rnd.IntN(5))
		if i == 3000 {
			p = 9 // after the last spill: only in memory
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
	if s.dir == "" {
		t.Fatal("3000 rows with a budget of 100 did not spill")
	}
	if got := s.partitions(); !slices.Equal(got, []int32{0, 1, 2, 3, 4, 9}) {
		t.Fatalf("partitions %v", got)
	}
	largest := 0
	for p, rows := range want {
		largest = max(largest, len(rows))
		got, err := s.rows(p)
		if err != nil {
			t.Fatal(err)
		}
		order := func(a, b verifyRow) int {
			return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.sess, b.sess), cmp.Compare(a.seq, b.seq))
		}
		if !slices.IsSortedFunc(got, byOffset) {
			t.Fatalf("partition %d: rows not sorted by offset", p)
		}
		slices.SortFunc(got, order)
		slices.SortFunc(rows, order)
		if !slices.Equal(got, rows) {
			t.Fatalf("partition %d: %d rows back, want %d (or different ones)", p, len(got), len(rows))
		}
	}
	if s.peak > budget+largest {
		t.Errorf("held %d rows at once, want at most %d (the budget and the largest partition)", s.peak, budget+largest)
	}
	dir := s.dir
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("spill directory %s after close: %v", dir, err)
	}
}
