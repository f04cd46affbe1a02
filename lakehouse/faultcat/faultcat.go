// Package faultcat wraps a real Iceberg catalog and injects the commit
// failures the commit protocol must survive: clean conflicts, ambiguous
// commits (applied, but the caller sees an error, even a conflict) and
// failed commits,
// failed table loads, another writer's commit landing just before one, and
// a storage whose clock is behind. It
// exists for floe's tests; the catalog underneath is real, so every injected
// outcome leaves the same state a real failure would.
package faultcat

import (
	"context"
	"errors"
	"fmt"
	stdfs "io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// Fault is what happens to one table commit.
type Fault int

const (
	// None passes the commit through.
	None Fault = iota
	// Conflict rejects the commit with table.ErrCommitFailed, unapplied.
	Conflict
	// Ambiguous applies the commit, then returns an error that is not
	// ErrCommitFailed, like a timeout after the catalog accepted it.
	Ambiguous
	// Unavailable returns a non-conflict error without applying, like a
	// connection refused.
	Unavailable
	// Stall waits for the caller's context to end without applying the
	// commit (or, for a load, see InjectLoads), like a catalog that takes
	// the request and never answers.
	Stall
	// AppliedConflict applies the commit, then returns
	// table.ErrCommitFailed: what iceberg-go's Glue catalog returns when
	// the AWS client resends an UpdateTable that applied but whose answer
	// was lost, and the resend conflicts with it.
	AppliedConflict
)

// ErrInjected marks errors this package made up.
var ErrInjected = errors.New("faultcat: injected")

// Catalog is a catalog.Catalog whose CommitTable follows a fault plan, and
// whose LoadTable follows another.
type Catalog struct {
	catalog.Catalog

	mu          sync.Mutex
	plan        []Fault
	loads       []Fault
	injected    map[Fault]int
	failedLoads int
	before      func()
	down        bool
	behind      time.Duration
	vanish      string // see RemoveWhileListed
}

// Wrap returns c with an empty fault plan.
func Wrap(c catalog.Catalog) *Catalog {
	return &Catalog{Catalog: c, injected: map[Fault]int{}}
}

// Inject appends faults to the plan; each commit consumes one.
func (c *Catalog) Inject(faults ...Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.plan = append(c.plan, faults...)
}

// InjectLoads appends faults to the plan of table loads; each LoadTable
// consumes one. Unavailable fails the load, like a catalog that cannot be
// reached; Stall waits for the caller's context to end, like one that
// takes the request and never answers; any other fault passes it through.
func (c *Catalog) InjectLoads(faults ...Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads = append(c.loads, faults...)
}

// Outage makes every table load fail as Unavailable while on, whatever
// the plan: a catalog down for a while.
func (c *Catalog) Outage(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = on
}

// FailedLoads returns how many loads InjectLoads (or Outage) failed so far.
func (c *Catalog) FailedLoads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failedLoads
}

// Before runs fn once, just before the next commit reaches the catalog:
// another writer's commit landing between a caller's read of the table
// and its commit.
func (c *Catalog) Before(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = fn
}

// ClockBehind makes the file IO of the tables loaded from now on stamp each
// file it writes d in the past: a storage (an HDFS NameNode, an NFS server)
// whose clock is d behind the caller's. Local files only.
func (c *Catalog) ClockBehind(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.behind = d
}

// RemoveWhileListed makes the file IO of the tables loaded from now on
// delete the file whose path ends in suffix just before a listing hands it
// on, once: a commit beside the listing deleting the metadata file it
// replaced. Local files only.
func (c *Catalog) RemoveWhileListed(suffix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vanish = suffix
}

// Injected returns how many commits got fault f so far.
func (c *Catalog) Injected(f Fault) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.injected[f]
}

// LoadTable loads through the real catalog and binds the table to the
// wrapper, so its transactions commit through CommitTable below.
func (c *Catalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	c.mu.Lock()
	f := None
	if len(c.loads) > 0 {
		f, c.loads = c.loads[0], c.loads[1:]
	}
	if c.down {
		f = Unavailable
	}
	if f == Unavailable {
		c.failedLoads++
	}
	behind, vanish := c.behind, c.vanish
	c.mu.Unlock()
	switch f {
	case Unavailable:
		return nil, fmt.Errorf("%w: catalog unavailable", ErrInjected)
	case Stall:
		<-ctx.Done()
		return nil, fmt.Errorf("%w: catalog stalled: %w", ErrInjected, ctx.Err())
	}
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	fsF := tbl.FS
	if behind != 0 || vanish != "" {
		var once sync.Once
		fsF = func(ctx context.Context) (iceio.IO, error) {
			fs, err := tbl.FS(ctx)
			if err != nil {
				return nil, err
			}
			local, ok := fs.(localIO)
			if !ok {
				return nil, fmt.Errorf("faultcat: %T is not a local file IO", fs)
			}
			return skewedIO{local, behind, vanish, &once}, nil
		}
	}
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), fsF, c), nil
}

// localIO is what iceberg-go's local file IO offers and floe uses.
type localIO interface {
	iceio.WriteFileIO
	iceio.ReadFileIO
	iceio.ListableIO
	iceio.StatIO
}

// skewedIO is a local file IO whose files are stamped behind in the past
// once written, and whose listings lose the file ending in vanish (once).
type skewedIO struct {
	localIO
	behind time.Duration
	vanish string
	once   *sync.Once
}

func (s skewedIO) stamp(name string) error {
	if s.behind == 0 {
		return nil
	}
	t := time.Now().Add(-s.behind)
	return os.Chtimes(strings.TrimPrefix(name, "file://"), t, t)
}

func (s skewedIO) WalkDir(root string, fn stdfs.WalkDirFunc) error {
	return s.localIO.WalkDir(root, func(p string, d stdfs.DirEntry, err error) error {
		if err == nil && s.vanish != "" && !d.IsDir() && strings.HasSuffix(p, s.vanish) {
			s.once.Do(func() { err = os.Remove(p) })
		}
		if err != nil {
			return err
		}
		return fn(p, d, nil)
	})
}

func (s skewedIO) WriteFile(name string, p []byte) error {
	if err := s.localIO.WriteFile(name, p); err != nil {
		return err
	}
	return s.stamp(name)
}

func (s skewedIO) Create(name string) (iceio.FileWriter, error) {
	w, err := s.localIO.Create(name)
	if err != nil {
		return nil, err
	}
	return skewedWriter{w, s, name}, nil
}

type skewedWriter struct {
	iceio.FileWriter
	io   skewedIO
	name string
}

func (w skewedWriter) Close() error {
	if err := w.FileWriter.Close(); err != nil {
		return err
	}
	return w.io.stamp(w.name)
}

// CommitTable applies the next fault of the plan around the real commit.
func (c *Catalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	c.mu.Lock()
	f := None
	if len(c.plan) > 0 {
		f, c.plan = c.plan[0], c.plan[1:]
	}
	c.injected[f]++
	before := c.before
	c.before = nil
	c.mu.Unlock()
	if before != nil {
		before()
	}

	switch f {
	case Conflict:
		return nil, "", fmt.Errorf("%w: %w conflict", table.ErrCommitFailed, ErrInjected)
	case Unavailable:
		return nil, "", fmt.Errorf("%w: catalog unavailable", ErrInjected)
	case Stall:
		<-ctx.Done()
		return nil, "", fmt.Errorf("%w: catalog stalled: %w", ErrInjected, ctx.Err())
	case Ambiguous:
		// Applied whatever becomes of the caller's request meanwhile.
		if _, _, err := c.Catalog.CommitTable(context.WithoutCancel(ctx), ident, reqs, updates); err != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("%w: timeout after the commit applied", ErrInjected)
	case AppliedConflict:
		if _, _, err := c.Catalog.CommitTable(context.WithoutCancel(ctx), ident, reqs, updates); err != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("%w: %w conflict on a resend of the applied commit", table.ErrCommitFailed, ErrInjected)
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}
