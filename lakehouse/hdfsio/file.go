package hdfsio

import (
	"errors"
	"io"
	"io/fs"
	"sync"

	"github.com/colinmarc/hdfs/v2"
)

// file is an open HDFS file or directory. Read and Seek use one reader;
// ReadAt borrows others from a free list, so concurrent ReadAt calls (Parquet
// column chunks) run in parallel and never move the Read position.
type file struct {
	fs   *FS
	name string // as the caller spelled it
	path string // the HDFS path

	mu     sync.Mutex
	seq    *hdfs.FileReader
	free   []*hdfs.FileReader
	closed bool
}

func (f *file) Stat() (fs.FileInfo, error) { return f.seq.Stat(), nil }

func (f *file) Read(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, f.fs.pathError("read", f.name, fs.ErrClosed)
	}
	n, err := f.seq.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = f.fs.pathError("read", f.name, err)
	}
	return n, err
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, f.fs.pathError("seek", f.name, fs.ErrClosed)
	}
	n, err := f.seq.Seek(offset, whence)
	if err != nil {
		return n, f.fs.pathError("seek", f.name, err)
	}
	return n, nil
}

// ReadAt reads len(b) bytes at off, like os.File.ReadAt: fewer only at the
// end of the file, with io.EOF.
func (f *file) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, f.fs.pathError("readat", f.name, errors.New("negative offset"))
	}
	if off >= f.seq.Stat().Size() {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	r, err := f.borrow()
	if err != nil {
		return 0, err
	}
	n, err := r.ReadAt(b, off)
	f.giveBack(r)
	if err != nil && !errors.Is(err, io.EOF) {
		err = f.fs.pathError("readat", f.name, err)
	}
	return n, err
}

func (f *file) borrow() (*hdfs.FileReader, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, f.fs.pathError("readat", f.name, fs.ErrClosed)
	}
	if n := len(f.free); n > 0 {
		r := f.free[n-1]
		f.free = f.free[:n-1]
		f.mu.Unlock()
		return r, nil
	}
	f.mu.Unlock()
	r, err := f.fs.client.Open(f.path)
	if err != nil {
		return nil, f.fs.pathError("readat", f.name, err)
	}
	return r, nil
}

func (f *file) giveBack(r *hdfs.FileReader) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = r.Close()
		return
	}
	f.free = append(f.free, r)
}

// ReadDir lists a directory, like os.File.ReadDir.
func (f *file) ReadDir(n int) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	infos, err := f.seq.Readdir(n)
	entries := make([]fs.DirEntry, len(infos))
	for i, fi := range infos {
		entries[i] = fs.FileInfoToDirEntry(fi)
	}
	if err != nil && err != io.EOF {
		err = f.fs.pathError("readdir", f.name, err)
	}
	return entries, err
}

func (f *file) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.fs.pathError("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	errs := []error{f.seq.Close()}
	for _, r := range f.free {
		errs = append(errs, r.Close())
	}
	f.free = nil
	if err := errors.Join(errs...); err != nil {
		return f.fs.pathError("close", f.name, err)
	}
	return nil
}

// writer is a file being written. HDFS allows one writer per file (the
// NameNode's lease); the data is complete and durable once Close returns nil.
type writer struct {
	fs   *FS
	name string
	w    *hdfs.FileWriter
}

func (w *writer) Write(b []byte) (int, error) {
	if len(b) == 0 {
		// colinmarc/hdfs would allocate an empty block, which never
		// reaches its minimum replication, so Close would never complete.
		return 0, nil
	}
	n, err := w.w.Write(b)
	if err != nil {
		return n, w.fs.pathError("write", w.name, err)
	}
	return n, nil
}

// ReadFrom copies r into the file through a 1 MiB buffer (one HDFS packet
// pipeline fill), not the 32 KiB of io.Copy.
func (w *writer) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{w}, r, make([]byte, 1<<20))
}

// abort closes a writer whose Write failed, once: its blocks may never
// replicate, so waiting for them as Close does would only delay the error.
func (w *writer) abort() { _ = w.w.Close() }

func (w *writer) Close() error {
	if err := closeWriter(w.w); err != nil {
		return w.fs.pathError("close", w.name, err)
	}
	return nil
}
