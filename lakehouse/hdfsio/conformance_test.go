package hdfsio_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	iceio "github.com/apache/iceberg-go/io"
)

// fullIO is what floe and iceberg-go's catalogs use of a file IO; both
// iceberg-go's LocalFS and hdfsio.FS implement it.
type fullIO interface {
	iceio.ReadFileIO
	iceio.WriteFileIO
	iceio.ListableIO
	iceio.StatIO
	iceio.RenameIO
	iceio.RenameNoReplaceIO
	iceio.RemoveAllIO
	iceio.MkdirAllIO
}

// payload is n deterministic bytes that differ with seed.
func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// conformance runs the same cases against one IO, under root (a directory
// location that does not exist yet: a local path or an hdfs:// URI). Sizes
// above 1 MiB cross HDFS block boundaries (deploy/hdfs uses 1 MiB blocks).
func conformance(t *testing.T, fsys fullIO, root string) {
	loc := func(parts ...string) string { return root + "/" + strings.Join(parts, "/") }
	mustWrite := func(t *testing.T, name string, b []byte) {
		t.Helper()
		if err := fsys.WriteFile(name, b); err != nil {
			t.Fatal(err)
		}
	}
	mustRead := func(t *testing.T, name string) []byte {
		t.Helper()
		b, err := fsys.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("WriteFileReadFile", func(t *testing.T) {
		for _, n := range []int{0, 1, 4096, 2*1024*1024 + 517} {
			name := loc("rw", fmt.Sprintf("f-%d.bin", n)) // parent created on demand
			want := payload(n, uint64(n))
			mustWrite(t, name, want)
			if got := mustRead(t, name); !bytes.Equal(got, want) {
				t.Fatalf("%d bytes: read back %d bytes that differ", n, len(got))
			}
			fi, err := fsys.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != int64(n) || fi.IsDir() || fi.Name() != fmt.Sprintf("f-%d.bin", n) {
				t.Fatalf("stat: size %d dir %v name %q, want %d false f-%d.bin", fi.Size(), fi.IsDir(), fi.Name(), n, n)
			}
		}
	})

	t.Run("CreateWriteReadFrom", func(t *testing.T) {
		name := loc("create", "deep", "er", "data.parquet")
		want := payload(3*1024*1024+11, 3)
		w, err := fsys.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(want[:100]); err != nil {
			t.Fatal(err)
		}
		if n, err := w.ReadFrom(bytes.NewReader(want[100:])); err != nil || n != int64(len(want)-100) {
			t.Fatalf("ReadFrom: %d, %v", n, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f, err := fsys.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes (want %d), equal %v, err %v", len(got), len(want), bytes.Equal(got, want), err)
		}
	})

	t.Run("CreateAndWriteFileReplace", func(t *testing.T) {
		name := loc("replace", "f")
		mustWrite(t, name, []byte("old content, longer than the new"))
		mustWrite(t, name, []byte("new"))
		if got := string(mustRead(t, name)); got != "new" {
			t.Fatalf("after WriteFile over a file: %q, want %q", got, "new")
		}
		w, err := fsys.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("created")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := string(mustRead(t, name)); got != "created" {
			t.Fatalf("after Create over a file: %q, want %q", got, "created")
		}
	})

	t.Run("SeekAndReadAt", func(t *testing.T) {
		name := loc("readat", "f.bin")
		want := payload(2*1024*1024+300, 9)
		mustWrite(t, name, want)
		f, err := fsys.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()

		// Sequential reads and seeks.
		head := make([]byte, 10)
		if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, want[:10]) {
			t.Fatalf("first read: %v", err)
		}
		if pos, err := f.Seek(1024*1024-5, io.SeekStart); err != nil || pos != 1024*1024-5 {
			t.Fatalf("seek start: %d, %v", pos, err)
		}
		cross := make([]byte, 10) // crosses the first block boundary
		if _, err := io.ReadFull(f, cross); err != nil || !bytes.Equal(cross, want[1024*1024-5:1024*1024+5]) {
			t.Fatalf("read across a block boundary after seek: %v", err)
		}
		if pos, err := f.Seek(-20, io.SeekEnd); err != nil || pos != int64(len(want)-20) {
			t.Fatalf("seek end: %d, %v", pos, err)
		}
		if pos, err := f.Seek(10, io.SeekCurrent); err != nil || pos != int64(len(want)-10) {
			t.Fatalf("seek current: %d, %v", pos, err)
		}
		tail, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(tail, want[len(want)-10:]) {
			t.Fatalf("tail: %d bytes, %v", len(tail), err)
		}

		// Concurrent ReadAt at random offsets, across block boundaries.
		if _, err := f.Seek(100, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range 25 {
					off := r.Int64N(int64(len(want) - 70000))
					n := 1 + r.IntN(70000)
					b := make([]byte, n)
					if got, err := f.ReadAt(b, off); err != nil || got != n || !bytes.Equal(b, want[off:off+int64(n)]) {
						errs <- fmt.Errorf("ReadAt(%d bytes at %d) = %d, %v, equal %v", n, off, got, err, bytes.Equal(b, want[off:off+int64(n)]))
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// ReadAt leaves the Read position alone.
		b := make([]byte, 4)
		if _, err := io.ReadFull(f, b); err != nil || !bytes.Equal(b, want[100:104]) {
			t.Fatalf("Read after ReadAt: %v, %v, want %v", b, err, want[100:104])
		}
		// Short at the end, with io.EOF; nothing past the end.
		b = make([]byte, 50)
		if n, err := f.ReadAt(b, int64(len(want)-20)); n != 20 || err != io.EOF || !bytes.Equal(b[:20], want[len(want)-20:]) {
			t.Fatalf("ReadAt over the end = %d, %v; want 20, io.EOF", n, err)
		}
		if n, err := f.ReadAt(b, int64(len(want)+5)); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt past the end = %d, %v; want 0, io.EOF", n, err)
		}
		if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(want)) {
			t.Fatalf("File.Stat: %v, %v", fi, err)
		}
	})

	t.Run("ListAndWalk", func(t *testing.T) {
		base := loc("tree")
		for _, p := range []string{"b/2.txt", "a/1.txt", "a/x/3.txt", "c.txt"} {
			mustWrite(t, base+"/"+p, []byte(p))
		}
		if err := fsys.MkdirAll(base + "/empty/dir"); err != nil {
			t.Fatal(err)
		}
		if err := fsys.MkdirAll(base + "/empty/dir"); err != nil {
			t.Fatalf("MkdirAll of an existing directory: %v", err)
		}
		var got []string
		err := fsys.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !strings.HasPrefix(path, base) {
				t.Errorf("walked path %q is not spelled like the root %q", path, base)
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(path, base), "/")
			if d.IsDir() {
				rel += "/"
			}
			got = append(got, rel)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"/", "a/", "a/1.txt", "a/x/", "a/x/3.txt", "b/", "b/2.txt", "c.txt", "empty/", "empty/dir/"}
		if !slices.Equal(got, want) {
			t.Fatalf("walk:\n got %q\nwant %q", got, want)
		}
		// SkipDir prunes, SkipAll stops.
		got = nil
		err = fsys.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			got = append(got, d.Name())
			if d.Name() == "a" {
				return fs.SkipDir
			}
			if d.Name() == "2.txt" {
				return fs.SkipAll
			}
			return nil
		})
		if err != nil || !slices.Equal(got, []string{"tree", "a", "b", "2.txt"}) {
			t.Fatalf("walk with SkipDir/SkipAll: %q, %v", got, err)
		}
		// Walking a missing root reports it to fn.
		err = fsys.WalkDir(loc("no-such-dir"), func(path string, d fs.DirEntry, err error) error { return err })
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("walk of a missing root: %v, want fs.ErrNotExist", err)
		}
		// A directory opened for reading lists its entries.
		d, err := fsys.Open(base + "/a")
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		rd, ok := d.(iceio.ReadDirFile)
		if !ok {
			t.Fatalf("%T of a directory does not implement ReadDirFile", d)
		}
		entries, err := rd.ReadDir(-1)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"1.txt", "x"}) {
			t.Fatalf("ReadDir: %q", names)
		}
		fi, err := fsys.Stat(base + "/a/x")
		if err != nil || !fi.IsDir() {
			t.Fatalf("Stat of a directory: %v, %v", fi, err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		base := loc("del")
		mustWrite(t, base+"/f", []byte("x"))
		mustWrite(t, base+"/sub/g", []byte("y"))
		if err := fsys.Remove(base + "/f"); err != nil {
			t.Fatal(err)
		}
		if _, err := fsys.Stat(base + "/f"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat after remove: %v, want fs.ErrNotExist", err)
		}
		if err := fsys.Remove(base + "/f"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("removing a missing file: %v, want fs.ErrNotExist", err)
		}
		if err := fsys.Remove(base + "/sub"); err == nil {
			t.Fatal("Remove of a non-empty directory succeeded")
		}
		if _, err := fsys.Stat(base + "/sub/g"); err != nil {
			t.Fatalf("a failed Remove of a directory removed its content: %v", err)
		}
		if err := fsys.RemoveAll(base); err != nil {
			t.Fatal(err)
		}
		if _, err := fsys.Stat(base); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat after RemoveAll: %v, want fs.ErrNotExist", err)
		}
		if err := fsys.RemoveAll(base); err != nil {
			t.Fatalf("RemoveAll of a missing path: %v, want nil", err)
		}
	})

	t.Run("Rename", func(t *testing.T) {
		base := loc("mv")
		mustWrite(t, base+"/a", []byte("A"))
		mustWrite(t, base+"/b", []byte("B"))
		if err := fsys.Rename(base+"/a", base+"/b"); err != nil {
			t.Fatal(err)
		}
		if got := string(mustRead(t, base+"/b")); got != "A" {
			t.Fatalf("Rename over a file: target holds %q, want A", got)
		}
		if _, err := fsys.Stat(base + "/a"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("source after Rename: %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("RenameNoReplace", func(t *testing.T) {
		base := loc("mvnr")
		mustWrite(t, base+"/src", []byte("SRC"))
		mustWrite(t, base+"/taken", []byte("TAKEN"))
		err := fsys.RenameNoReplace(base+"/src", base+"/taken")
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("RenameNoReplace onto an existing file: %v, want fs.ErrExist", err)
		}
		if got := string(mustRead(t, base+"/taken")); got != "TAKEN" {
			t.Fatalf("refused RenameNoReplace changed the target to %q", got)
		}
		if got := string(mustRead(t, base+"/src")); got != "SRC" {
			t.Fatalf("refused RenameNoReplace changed the source to %q", got)
		}
		if err := fsys.RenameNoReplace(base+"/src", base+"/free"); err != nil {
			t.Fatal(err)
		}
		if got := string(mustRead(t, base+"/free")); got != "SRC" {
			t.Fatalf("target holds %q, want SRC", got)
		}
		if _, err := fsys.Stat(base + "/src"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("source after RenameNoReplace: %v, want fs.ErrNotExist", err)
		}
		if err := fsys.RenameNoReplace(base+"/missing", base+"/other"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("RenameNoReplace of a missing source: %v, want fs.ErrNotExist", err)
		}
		if _, err := fsys.Stat(base + "/other"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("failed RenameNoReplace left a target behind: %v", err)
		}

		// Racing renames to one target: exactly one wins, and the target
		// holds the winner's content (the commit-claim pattern of
		// iceberg-go's Hadoop catalog).
		const racers = 6
		for i := range racers {
			mustWrite(t, fmt.Sprintf("%s/race-%d", base, i), []byte(fmt.Sprint(i)))
		}
		var wg sync.WaitGroup
		results := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = fsys.RenameNoReplace(fmt.Sprintf("%s/race-%d", base, i), base+"/v1.metadata.json")
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range results {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("racers %d and %d both renamed onto the target", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, fs.ErrExist):
				t.Fatalf("racer %d: %v, want nil or fs.ErrExist", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no racer renamed onto the free target")
		}
		if got := string(mustRead(t, base+"/v1.metadata.json")); got != fmt.Sprint(winner) {
			t.Fatalf("target holds %q, the winner was %d", got, winner)
		}
	})

	t.Run("MissingFileErrors", func(t *testing.T) {
		name := loc("nope", "missing.parquet")
		_, errOpen := fsys.Open(name)
		_, errRead := fsys.ReadFile(name)
		_, errStat := fsys.Stat(name)
		for op, err := range map[string]error{"Open": errOpen, "ReadFile": errRead, "Stat": errStat} {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s of a missing file: %v, want fs.ErrNotExist", op, err)
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || !strings.HasSuffix(pe.Path, "nope/missing.parquet") {
				t.Errorf("%s error %v does not name the path", op, err)
			}
		}
	})
}

// TestLocalConformance pins the behaviour hdfsio must match: iceberg-go's own
// local file system IO.
func TestLocalConformance(t *testing.T) {
	conformance(t, iceio.LocalFS{}, t.TempDir()+"/root")
}
