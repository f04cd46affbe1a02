package lakehouse

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
)

// verifySpillRows is how many rows Verify holds in memory (24 bytes each)
// before it moves them to its spill file; VerifyRoutes shares it among
// its tables.
var verifySpillRows = 8 << 20

// rowStore keeps a scan's verifyRows by partition for a walk one partition
// at a time: in memory up to budget rows, then in a temporary file (20
// bytes a row), each spill writing every partition's rows as chunks the
// store indexes. A walk then holds one partition's rows at a time, not the
// table's. The file is unlinked as soon as it is made: it goes with the
// process, whatever ends it.
type rowStore struct {
	budget int
	mem    map[int32][]verifyRow
	inMem  int
	f      *os.File // nil until the first spill
	// leftName is the file's name while unlinking it failed (close tries
	// again).
	leftName string
	size     int64 // bytes written to f
	chunks   map[int32][]spillChunk
	// peak is the most rows held in memory at once, partition loads
	// included (for tests).
	peak int
}

// spillChunk is where rows of one partition lie in the file.
type spillChunk struct {
	at   int64
	rows int
}

// spillRowBytes is a spilled row's size; spillBuf is how many bytes of
// rows go to or come from the file at once.
const spillRowBytes, spillBuf = 20, 1 << 20

func newRowStore(budget int) *rowStore {
	return &rowStore{budget: max(budget, 1), mem: map[int32][]verifyRow{}, chunks: map[int32][]spillChunk{}}
}

// add keeps v, spilling what memory holds once it holds the budget.
func (s *rowStore) add(v verifyRow) error {
	s.mem[v.part] = append(s.mem[v.part], v)
	s.inMem++
	s.peak = max(s.peak, s.inMem)
	if s.inMem < s.budget {
		return nil
	}
	return s.spill()
}

// finish ends the adds: once the store has spilled, what memory still
// holds goes to the file too, rather than stay there through the walk.
func (s *rowStore) finish() error {
	if s.f == nil || s.inMem == 0 {
		return nil
	}
	return s.spill()
}

func (s *rowStore) spill() error {
	if s.f == nil {
		f, err := os.CreateTemp("", "floe-verify-*")
		if err != nil {
			return fmt.Errorf("verify: a file for the rows beyond %d in memory: %w", s.budget, err)
		}
		s.f = f
		if os.Remove(f.Name()) != nil {
			s.leftName = f.Name()
		}
	}
	buf := make([]byte, 0, spillBuf)
	for p, rows := range s.mem {
		for len(rows) > 0 {
			n := min(len(rows), spillBuf/spillRowBytes)
			buf = buf[:0]
			for _, v := range rows[:n] {
				buf = binary.LittleEndian.AppendUint32(buf, v.sess)
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.off))
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.seq))
			}
			if _, err := s.f.WriteAt(buf, s.size); err != nil {
				return fmt.Errorf("verify: spilling rows to %s: %w", s.f.Name(), err)
			}
			s.chunks[p] = append(s.chunks[p], spillChunk{at: s.size, rows: n})
			s.size += int64(len(buf))
			rows = rows[n:]
		}
	}
	clear(s.mem)
	s.inMem = 0
	return nil
}

// partitions returns the partitions with rows.
func (s *rowStore) partitions() map[int32]struct{} {
	ps := make(map[int32]struct{}, len(s.mem)+len(s.chunks))
	for p := range s.mem {
		ps[p] = struct{}{}
	}
	for p := range s.chunks {
		ps[p] = struct{}{}
	}
	return ps
}

// take returns partition p's rows sorted by offset, read back from the
// file with what memory holds of them, which it lets go: each partition is
// taken once.
func (s *rowStore) take(p int32) ([]verifyRow, error) {
	mem := s.mem[p]
	delete(s.mem, p)
	s.inMem -= len(mem)
	chunks := s.chunks[p]
	delete(s.chunks, p)
	if len(chunks) == 0 {
		slices.SortFunc(mem, byOffset)
		return mem, nil
	}
	n := len(mem)
	for _, c := range chunks {
		n += c.rows
	}
	rows := make([]verifyRow, 0, n)
	s.peak = max(s.peak, s.inMem+n)
	buf := make([]byte, spillBuf)
	for _, c := range chunks {
		b := buf[:c.rows*spillRowBytes]
		if _, err := s.f.ReadAt(b, c.at); err != nil {
			return nil, fmt.Errorf("verify: reading spilled rows back from %s: %w", s.f.Name(), err)
		}
		for ; len(b) > 0; b = b[spillRowBytes:] {
			rows = append(rows, verifyRow{part: p, sess: binary.LittleEndian.Uint32(b[0:]),
				off: int64(binary.LittleEndian.Uint64(b[4:])), seq: int64(binary.LittleEndian.Uint64(b[12:]))})
		}
	}
	rows = append(rows, mem...)
	slices.SortFunc(rows, byOffset)
	return rows, nil
}

func byOffset(a, b verifyRow) int { return cmp.Compare(a.off, b.off) }

// close lets the spill file go.
func (s *rowStore) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if s.leftName != "" {
		err = errors.Join(err, os.Remove(s.leftName))
	}
	return err
}
