package lakehouse

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
)

// verifySpillRows is how many rows a rowStore holds in memory (24 bytes
// each) before it moves them to its partitions' files.
var verifySpillRows = 8 << 20

// rowStore keeps a scan's verifyRows by partition for a walk one partition
// at a time: in memory up to verifySpillRows, then in a temporary file per
// partition (20 bytes a row: its partition is the file's). Verify then
// holds one partition's rows at a time, not the table's.
type rowStore struct {
	mem   map[int32][]verifyRow
	inMem int
	files map[int32]*spillFile
	dir   string // made at the first spill
	// peak is the most rows held in memory at once, partition loads
	// included (for tests).
	peak int
}

type spillFile struct {
	f    *os.File
	rows int
}

// spillRowBytes is a spilled row's size; spillChunk is how many bytes of
// rows go to or come from a file at once.
const spillRowBytes, spillChunk = 20, 1 << 20

func newRowStore() *rowStore {
	return &rowStore{mem: map[int32][]verifyRow{}, files: map[int32]*spillFile{}}
}

// add keeps v, spilling what memory holds once it holds verifySpillRows.
func (s *rowStore) add(v verifyRow) error {
	s.mem[v.part] = append(s.mem[v.part], v)
	s.inMem++
	s.peak = max(s.peak, s.inMem)
	if s.inMem < verifySpillRows {
		return nil
	}
	return s.spill()
}

func (s *rowStore) spill() error {
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "floe-verify-")
		if err != nil {
			return fmt.Errorf("verify: a directory for the rows beyond %d in memory: %w", verifySpillRows, err)
		}
		s.dir = dir
	}
	buf := make([]byte, 0, spillChunk)
	for p, rows := range s.mem {
		sf := s.files[p]
		if sf == nil {
			f, err := os.CreateTemp(s.dir, fmt.Sprintf("p%d-", p))
			if err != nil {
				return fmt.Errorf("verify: spilling rows: %w", err)
			}
			sf = &spillFile{f: f}
			s.files[p] = sf
		}
		for len(rows) > 0 {
			n := min(len(rows), spillChunk/spillRowBytes)
			buf = buf[:0]
			for _, v := range rows[:n] {
				buf = binary.LittleEndian.AppendUint32(buf, v.sess)
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.off))
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.seq))
			}
			if _, err := sf.f.Write(buf); err != nil {
				return fmt.Errorf("verify: spilling rows to %s: %w", sf.f.Name(), err)
			}
			sf.rows += n
			rows = rows[n:]
		}
	}
	clear(s.mem)
	s.inMem = 0
	return nil
}

// partitions returns the partitions with rows, in order.
func (s *rowStore) partitions() []int32 {
	return slices.Sorted(maps.Keys(s.partitionSet()))
}

func (s *rowStore) partitionSet() map[int32]struct{} {
	ps := make(map[int32]struct{}, len(s.mem)+len(s.files))
	for p := range s.mem {
		ps[p] = struct{}{}
	}
	for p := range s.files {
		ps[p] = struct{}{}
	}
	return ps
}

// rows returns partition p's rows sorted by offset: read back from its file
// when it has one, with what memory holds of it.
func (s *rowStore) rows(p int32) ([]verifyRow, error) {
	mem := s.mem[p]
	sf := s.files[p]
	if sf == nil {
		slices.SortFunc(mem, byOffset)
		return mem, nil
	}
	rows := make([]verifyRow, 0, sf.rows+len(mem))
	buf := make([]byte, spillChunk)
	for at := 0; at < sf.rows; {
		n := min(sf.rows-at, spillChunk/spillRowBytes)
		b := buf[:n*spillRowBytes]
		if _, err := sf.f.ReadAt(b, int64(at)*spillRowBytes); err != nil {
			return nil, fmt.Errorf("verify: reading spilled rows back from %s: %w", sf.f.Name(), err)
		}
		for ; len(b) > 0; b = b[spillRowBytes:] {
			rows = append(rows, verifyRow{part: p, sess: binary.LittleEndian.Uint32(b[0:]),
				off: int64(binary.LittleEndian.Uint64(b[4:])), seq: int64(binary.LittleEndian.Uint64(b[12:]))})
		}
		at += n
	}
	rows = append(rows, mem...)
	s.peak = max(s.peak, s.inMem+sf.rows)
	slices.SortFunc(rows, byOffset)
	return rows, nil
}

func byOffset(a, b verifyRow) int { return cmp.Compare(a.off, b.off) }

// close removes the spill files.
func (s *rowStore) close() error {
	var errs []error
	for _, sf := range s.files {
		errs = append(errs, sf.f.Close())
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
