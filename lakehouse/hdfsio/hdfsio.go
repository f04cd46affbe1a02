// Package hdfsio is iceberg-go file IO for hdfs:// locations, on the pure-Go
// HDFS client github.com/colinmarc/hdfs/v2. Importing it registers the
// "hdfs" scheme with iceberg-go's io registry, so a catalog whose warehouse
// (or a table whose location) is hdfs://host:port/path reads and writes
// there. It is configured from the catalog properties (Prop* keys): NameNode
// addresses, the user, or a Kerberos keytab login.
//
// Paths given to it are hdfs://authority/path URIs (or bare absolute paths);
// a URI naming another authority than the one it was loaded for is refused,
// unless PropNamenode names the NameNodes: they then serve every authority.
// Clients are shared per configuration for the life of the process: iceberg-go
// loads an IO for every table load and never closes it.
package hdfsio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/colinmarc/hdfs/v2"
	"github.com/google/uuid"
)

// Scheme is the URI scheme this package registers.
const Scheme = "hdfs"

func init() {
	iceio.Register(Scheme, func(_ context.Context, u *url.URL, props map[string]string) (iceio.IO, error) {
		return Load(u.Host, props)
	})
}

// FS is an iceberg-go IO on one HDFS. It implements io.IO, ReadFileIO,
// WriteFileIO, ListableIO, StatIO, RenameIO, RenameNoReplaceIO, RemoveAllIO,
// MkdirAllIO and BulkRemovableIO, and is safe for concurrent use.
type FS struct {
	client    *hdfs.Client
	authority string // the hdfs:// authority it serves ("" accepts any)
	user      string
	// noDataProtection: Kerberos without PropDataTransferProtection, so a
	// DataNode that wants SASL drops the connection; cause says so.
	noDataProtection bool
	namenodes        *addrSet // of the client's NameNode connections
}

var (
	clientsMu sync.Mutex
	clients   = map[string]*client{}
)

// client is a shared colinmarc/hdfs client and the remote addresses of the
// NameNode connections it made.
type client struct {
	*hdfs.Client
	namenodes *addrSet
}

// addrSet is a set of remote addresses, safe for concurrent use.
type addrSet struct{ sync.Map }

// recording wraps dial to add the remote address of each connection made.
func (s *addrSet) recording(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			s.Store(c.RemoteAddr().String(), true)
		}
		return c, err
	}
}

func (s *addrSet) has(a net.Addr) bool {
	_, ok := s.Load(a.String())
	return ok
}

// Load returns the IO for the hdfs:// authority (host[:port], or an HA
// nameservice name when hdfs.namenode lists the NameNodes) configured from
// catalog properties. It connects to the NameNode the first time a
// configuration is used and fails with the address when it cannot.
func Load(authority string, props map[string]string) (*FS, error) {
	cfg, err := ConfigFromProps(authority, props)
	if err != nil {
		return nil, fmt.Errorf("hdfs://%s: %w", authority, err)
	}
	c, err := sharedClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("hdfs://%s: %w", authority, err)
	}
	served := authority
	if cfg.AnyAuthority {
		served = "" // as README says: whatever the location's authority
	}
	return &FS{client: c.Client, authority: served, user: c.User(), namenodes: c.namenodes,
		noDataProtection: cfg.Kerberos != nil && cfg.DataTransferProtection == ""}, nil
}

func sharedClient(cfg Config) (*client, error) {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	key := cfg.key()
	if c, ok := clients[key]; ok {
		return c, nil
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	clients[key] = c
	return c, nil
}

// refusedSimple reports whether err is how a NameNode that requires Kerberos
// turns away a client without it: it answers the first call with a SASL
// message and closes the connection, so colinmarc/hdfs v2.4.0 reports its
// unexported errUnexpectedSequenceNumber, or a broken pipe or reset if the
// close came first (as text: "no available namenodes: %s" does not wrap).
func refusedSimple(err error) bool {
	msg := err.Error()
	return msg == "unexpected sequence number" || strings.HasSuffix(msg, "broken pipe") ||
		strings.HasSuffix(msg, "connection reset by peer")
}

func newClient(cfg Config) (*client, error) {
	timeout := cfg.DialTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	dial := deadlineDialer((&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext, cfg.IOTimeout)
	namenodes := &addrSet{}
	opts := hdfs.ClientOptions{
		Addresses:              cfg.Namenodes,
		NamenodeDialFunc:       namenodes.recording(dial),
		DatanodeDialFunc:       dial,
		DataTransferProtection: cfg.DataTransferProtection,
		// DataNodes are addressed by the hostname they register with, which
		// is what works across NAT, containers and multi-homed hosts.
		UseDatanodeHostname: true,
	}
	if cfg.Kerberos != nil {
		kc, err := cfg.Kerberos.login()
		if err != nil {
			return nil, err
		}
		opts.KerberosClient = kc
		opts.KerberosServicePrincipleName = cfg.Kerberos.servicePrincipalName()
	} else {
		u, err := cfg.user()
		if err != nil {
			return nil, err
		}
		opts.User = u
	}
	c, err := hdfs.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("connecting to NameNode %s: %w", strings.Join(cfg.Namenodes, ","), err)
	}
	// NewClient dials lazily on some paths; ask the NameNode something cheap
	// so an unreachable or refusing NameNode fails here, with its address.
	if _, err := c.Stat("/"); err != nil {
		c.Close()
		cause := (&FS{user: c.User()}).cause(err)
		if cfg.Kerberos == nil && refusedSimple(cause) {
			return nil, fmt.Errorf("connecting to NameNode %s as %s: the NameNode refused simple authentication (%v), "+
				"as one that requires Kerberos does: set %s, %s and %s", strings.Join(cfg.Namenodes, ","), c.User(), cause,
				PropKeytab, PropPrincipal, PropServicePrincipal)
		}
		return nil, fmt.Errorf("connecting to NameNode %s as %s: %w", strings.Join(cfg.Namenodes, ","), c.User(), cause)
	}
	return &client{Client: c, namenodes: namenodes}, nil
}

// User is the HDFS user the IO acts as (the principal's short name under
// Kerberos).
func (f *FS) User() string { return f.user }

// hdfsPath turns a location into the absolute HDFS path it names.
func (f *FS) hdfsPath(name string) (string, error) {
	p := name
	if rest, ok := cutScheme(name); ok {
		auth, pth, _ := strings.Cut(rest, "/")
		if f.authority != "" && auth != "" && auth != f.authority {
			return "", fmt.Errorf("%s is on hdfs://%s, this IO serves hdfs://%s", name, auth, f.authority)
		}
		p = "/" + pth
	} else if strings.Contains(name, "://") {
		return "", fmt.Errorf("%s: not an hdfs:// location", name)
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%s: HDFS paths must be absolute", name)
	}
	return path.Clean(p), nil
}

func cutScheme(name string) (string, bool) {
	if len(name) > len(Scheme)+3 && strings.EqualFold(name[:len(Scheme)+3], Scheme+"://") {
		return name[len(Scheme)+3:], true
	}
	return "", false
}

// pathError reports op on name (as the caller spelled it) with the cause
// colinmarc/hdfs reported, naming the user on a permission error.
func (f *FS) pathError(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: f.cause(err)}
}

// cause is the error under colinmarc/hdfs's *os.PathError (which names the
// bare HDFS path), with Java exceptions it passes through raw mapped to
// io/fs errors and the user added to a permission error.
func (f *FS) cause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var remote hdfs.Error
	if errors.As(err, &remote) {
		switch remote.Exception() {
		case "java.io.FileNotFoundException":
			err = fs.ErrNotExist
		case "org.apache.hadoop.security.AccessControlException":
			err = fs.ErrPermission
		case "org.apache.hadoop.fs.FileAlreadyExistsException":
			err = fs.ErrExist
		}
	}
	if errors.Is(err, fs.ErrPermission) {
		err = fmt.Errorf("%w (HDFS user %q)", fs.ErrPermission, f.user)
	}
	// A Kerberized cluster whose DataNodes run on unprivileged ports
	// requires SASL on every DataNode connection and resets one without it.
	// A NameNode's connection drops for other reasons (a restart, a
	// failover); a bare EOF names no connection, so the hint stays a guess.
	var hinted noDataProtectionError
	if f.noDataProtection && !errors.As(err, &hinted) && !f.fromNamenode(err) &&
		(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		err = noDataProtectionError{err}
	}
	return err
}

// fromNamenode reports whether err names a connection to a NameNode.
func (f *FS) fromNamenode(err error) bool {
	var op *net.OpError
	return f.namenodes != nil && errors.As(err, &op) && op.Addr != nil && f.namenodes.has(op.Addr)
}

// noDataProtectionError is a dropped connection, not a NameNode's, under
// Kerberos without PropDataTransferProtection: its message says what to
// set if a DataNode dropped it.
type noDataProtectionError struct{ err error }

func (e noDataProtectionError) Error() string {
	return fmt.Sprintf("%v (if a DataNode dropped the connection: with Kerberos, DataNodes on unprivileged ports require SASL; "+
		"set %s to the cluster's dfs.data.transfer.protection)", e.err, PropDataTransferProtection)
}

func (e noDataProtectionError) Unwrap() error { return e.err }

// Open opens a file for reading (Read, Seek, concurrent ReadAt) or a
// directory for ReadDir.
func (f *FS) Open(name string) (iceio.File, error) {
	p, err := f.hdfsPath(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	r, err := f.client.Open(p)
	if err != nil {
		return nil, f.pathError("open", name, err)
	}
	return &file{fs: f, name: name, path: p, seq: r}, nil
}

// ReadFile reads a whole file.
func (f *FS) ReadFile(name string) ([]byte, error) {
	p, err := f.hdfsPath(name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	b, err := f.client.ReadFile(p)
	if err != nil {
		return nil, f.pathError("read", name, err)
	}
	return b, nil
}

// Create creates the file (and its parent directories) for writing; an
// existing file is replaced, as on a local file system. The replacement is
// not atomic (delete, then create): iceberg-go only creates new, unique
// names. The data is durable on the DataNodes once Close returns nil.
func (f *FS) Create(name string) (iceio.FileWriter, error) {
	w, err := f.create(name)
	if err != nil {
		return nil, err // not a nil *writer in a non-nil interface
	}
	return w, nil
}

func (f *FS) create(name string) (*writer, error) {
	p, err := f.hdfsPath(name)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	if err := f.client.MkdirAll(path.Dir(p), 0o755); err != nil {
		return nil, f.pathError("create", name, err)
	}
	w, err := f.client.Create(p)
	if errors.Is(err, fs.ErrExist) {
		if err := f.client.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, f.pathError("create", name, err)
		}
		w, err = f.client.Create(p)
	}
	if err != nil {
		return nil, f.pathError("create", name, err)
	}
	return &writer{fs: f, name: name, w: w}, nil
}

// WriteFile writes data to a hidden temporary file beside name and renames
// it over name, so readers see the old content or the new, never a part.
func (f *FS) WriteFile(name string, data []byte) error {
	p, err := f.hdfsPath(name)
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+"."+uuid.NewString()+".tmp")
	w, err := f.create(tmp)
	if err != nil {
		return f.pathError("write", name, err)
	}
	if _, err := w.Write(data); err != nil {
		w.abort()
		_ = f.client.Remove(tmp)
		return f.pathError("write", name, err)
	}
	if err := w.Close(); err != nil {
		_ = f.client.Remove(tmp)
		return f.pathError("write", name, err)
	}
	if err := f.client.Rename(tmp, p); err != nil {
		_ = f.client.Remove(tmp)
		return f.pathError("write", name, err)
	}
	return nil
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(name string) error {
	p, err := f.hdfsPath(name)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	if err := f.client.Remove(p); err != nil {
		return f.pathError("remove", name, err)
	}
	return nil
}

// RemoveAll removes name and everything below it; a missing name is not an
// error.
func (f *FS) RemoveAll(name string) error {
	p, err := f.hdfsPath(name)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	if p == "/" {
		return &fs.PathError{Op: "remove", Path: name, Err: errors.New("refusing to remove the HDFS root")}
	}
	if err := f.client.RemoveAll(p); err != nil {
		return f.pathError("remove", name, err)
	}
	return nil
}

// DeleteFiles removes files one by one (HDFS has no batch delete), treating
// missing files as deleted.
func (f *FS) DeleteFiles(_ context.Context, names []string) ([]string, error) {
	deleted := make([]string, 0, len(names))
	var errs []error
	for _, n := range names {
		if err := f.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, n)
	}
	return deleted, errors.Join(errs...)
}

// MkdirAll creates a directory and its parents; existing ones are fine.
func (f *FS) MkdirAll(name string) error {
	p, err := f.hdfsPath(name)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	if err := f.client.MkdirAll(p, 0o755); err != nil {
		return f.pathError("mkdir", name, err)
	}
	return nil
}

// Stat describes a file or directory; a missing one is fs.ErrNotExist.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	p, err := f.hdfsPath(name)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	fi, err := f.client.Stat(p)
	if err != nil {
		return nil, f.pathError("stat", name, err)
	}
	return fi, nil
}

// Rename moves oldpath to newpath, atomically replacing a file at newpath
// (the NameNode's rename with OVERWRITE).
func (f *FS) Rename(oldpath, newpath string) error {
	src, dst, err := f.twoPaths(oldpath, newpath)
	if err != nil {
		return err
	}
	if err := f.client.Rename(src, dst); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: f.cause(err)}
	}
	return nil
}

// RenameNoReplace moves the file oldpath to newpath only if newpath does not
// exist, failing with fs.ErrExist otherwise.
//
// colinmarc/hdfs only exposes the overwriting rename, so the target is first
// claimed with an exclusive create (the NameNode creates a file only when the
// path is free, atomically), then the source is renamed over the claim.
// Guarantees: of concurrent RenameNoReplace calls (from any number of
// processes) to one target, at most one succeeds, and none replaces a file or
// directory that existed before it claimed the target. Not guaranteed: a
// reader may briefly see an empty file at newpath between the claim and the
// rename; a plain Rename to newpath in that window is replaced by the
// source; and if this process dies in that window, the empty claim stays and
// later calls fail with fs.ErrExist until it is removed. If the rename fails
// the claim is removed (see settleRename), or the error says it is left.
func (f *FS) RenameNoReplace(oldpath, newpath string) error {
	src, dst, err := f.twoPaths(oldpath, newpath)
	if err != nil {
		return err
	}
	linkErr := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: f.cause(err)}
	}
	fi, err := f.client.Stat(src)
	if err != nil {
		return linkErr(err)
	}
	if fi.IsDir() {
		return linkErr(errors.New("source is a directory; only files can be renamed without replace"))
	}
	if err := f.client.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return linkErr(err)
	}
	claim, err := f.client.Create(dst)
	if err != nil {
		return linkErr(err)
	}
	if err := closeWriter(claim); err != nil {
		return linkErr(f.settleRename(src, dst, err))
	}
	if err := f.client.Rename(src, dst); err != nil {
		return linkErr(f.settleRename(src, dst, err))
	}
	return nil
}

// settleAfter is how long settleRename tries to reach the NameNode: past
// colinmarc/hdfs's 5 s during which it refuses every call to a NameNode
// that failed one.
const settleAfter = 12 * time.Second

// settleRename settles a RenameNoReplace of src to dst whose claim or
// rename failed with err: a rename whose answer was lost may have
// happened (src gone, dst holding it: nil, it did); else the claim at
// dst, still empty, is removed and err returned. A failed call usually
// follows a NameNode that stopped answering, whose next calls colinmarc
// refuses at once: removing the claim right away left an empty file at
// dst (for a Hadoop catalog, its newest metadata version, unreadable), so
// it is tried again for settleAfter; if it cannot be, err says so.
func (f *FS) settleRename(src, dst string, err error) error {
	deadline := time.Now().Add(settleAfter)
	for {
		serr := f.unclaim(src, dst)
		if serr == nil {
			return err
		}
		if errors.Is(serr, errRenamed) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w; and its empty claim at the target could not be removed: %v", err, f.cause(serr))
		}
		time.Sleep(time.Second)
	}
}

// errRenamed is unclaim's word that the rename happened after all.
var errRenamed = errors.New("renamed")

// unclaim removes the claim at dst when src is still there and dst empty;
// it returns errRenamed when src is gone and dst holds bytes (the rename
// happened), nil when there is nothing left to remove.
func (f *FS) unclaim(src, dst string) error {
	_, serr := f.client.Stat(src)
	if serr != nil && !errors.Is(serr, fs.ErrNotExist) {
		return serr
	}
	fi, err := f.client.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case serr != nil && fi.Size() > 0:
		return errRenamed
	case fi.Size() > 0 || fi.IsDir():
		return nil // not the claim
	}
	if err := f.client.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (f *FS) twoPaths(oldpath, newpath string) (string, string, error) {
	src, err := f.hdfsPath(oldpath)
	if err != nil {
		return "", "", &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	dst, err := f.hdfsPath(newpath)
	if err != nil {
		return "", "", &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return src, dst, nil
}

// WalkDir walks the tree at root like io/fs.WalkDir (lexical order, root
// first, SkipDir and SkipAll honoured); fn gets paths spelled like root.
func (f *FS) WalkDir(root string, fn fs.WalkDirFunc) error {
	p, err := f.hdfsPath(root)
	if err != nil {
		return fn(root, nil, &fs.PathError{Op: "walk", Path: root, Err: err})
	}
	// fs.WalkDir names are relative to "/" ("a/b" is /a/b, "." is /). fn
	// gets root as given, and the paths below it in clean form after root's
	// scheme and authority.
	rel, prefix := ".", "/"
	if p != "/" {
		rel = p[1:]
	}
	if rest, ok := cutScheme(root); ok {
		auth, _, _ := strings.Cut(rest, "/")
		prefix = root[:len(root)-len(rest)] + auth + "/"
	}
	return fs.WalkDir(walkFS{f}, rel, func(name string, d fs.DirEntry, err error) error {
		full := prefix + name
		if name == rel {
			full = root
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = &fs.PathError{Op: pe.Op, Path: full, Err: pe.Err}
		}
		return fn(full, d, err)
	})
}

// walkFS presents the HDFS root as an io/fs.FS ("a/b" is /a/b) for WalkDir.
type walkFS struct{ f *FS }

func (w walkFS) Open(name string) (fs.File, error) { return w.f.Open(path.Join("/", name)) }

func (w walkFS) Stat(name string) (fs.FileInfo, error) { return w.f.Stat(path.Join("/", name)) }

func (w walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	infos, err := w.f.client.ReadDir(path.Join("/", name))
	if err != nil {
		return nil, w.f.pathError("readdir", path.Join("/", name), err)
	}
	entries := make([]fs.DirEntry, len(infos))
	for i, fi := range infos {
		entries[i] = fs.FileInfoToDirEntry(fi)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// closeWriteTimeout bounds how long closeWriter waits for the NameNode to see
// the last block replicated. Java's DFSOutputStream gives up after about 12s
// (five retries from 400ms); a DataNode on a busy machine, whose block report
// waits for CPU, has been seen to need more: with Kerberos and data-transfer
// encryption on the 2-core machine this project is built on, over 30 s once.
// Giving up fails the flush, which is then redone from the start.
const closeWriteTimeout = 60 * time.Second

// closeWriter closes w, retrying while the NameNode has not yet seen the last
// block reach its minimum replication (hdfs.ErrReplicating), as Java's
// DFSOutputStream does: backoff from 50ms doubling to 2s, for at most
// closeWriteTimeout.
func closeWriter(w *hdfs.FileWriter) error {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(closeWriteTimeout)
	for {
		err := w.Close()
		if err == nil || !hdfs.IsErrReplicating(err) || time.Now().Add(backoff).After(deadline) {
			return err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}
