// Package lakehouse turns buffered Arrow batches into Iceberg commits: Parquet
// writing, the dedupe MERGE on (topic, partition, offset), the offset
// watermarks kept in snapshot summaries, and the fenced commit protocol of
// DESIGN.md. Its invariant: for every partition p the table holds each offset
// below the watermark W(p) exactly once (or the record was dead-lettered), and
// no offset at or above W(p).
package lakehouse

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/config"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	// Catalog implementations selectable with catalog.type.
	_ "github.com/apache/iceberg-go/catalog/glue"
	_ "github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/catalog/sql"
	// hdfs:// file IO for warehouses and table locations on HDFS.
	_ "github.com/floe-dev/floe/lakehouse/hdfsio"
	// The pure-Go SQLite driver, registered as "sqlite", for the default catalog.
	_ "modernc.org/sqlite"

	"github.com/floe-dev/floe/internal/redact"
	"github.com/floe-dev/floe/schemas"
)

// Config says which table to write and through which catalog.
type Config struct {
	// Table is "namespace.name" (namespaces may be nested: "a.b.name").
	Table string
	// Catalog is handed to iceberg-go's catalog.Load as properties ("type",
	// "uri", "warehouse", ...). For SQL on SQLite, WAL mode and a busy timeout
	// are added to the uri unless it sets its own pragmas.
	Catalog map[string]string
	// Group is the consumer group whose offset map commits carry.
	Group string
	// TargetFileBytes bounds the size of one data file; 0 means 256 MiB.
	TargetFileBytes int64
	// Logger receives commit-protocol events (fences, conflicts, retries).
	Logger *slog.Logger
	// Existing refuses to create the table: Open fails, wrapping
	// catalog.ErrNoSuchTable, when the catalog lacks it. For commands that
	// read or maintain a table, where a misspelt name or a wrong catalog
	// would otherwise get a new empty table (and a reconciliation that
	// passes). It refuses to create a sql catalog's SQLite database too:
	// Open fails, naming table.catalog.uri, when its file does not exist,
	// before the catalog is opened (which would create an empty database
	// at a misspelt uri).
	Existing bool
}

func (c *Config) validate() error {
	if _, err := parseIdent(c.Table); err != nil {
		return err
	}
	if c.Catalog["type"] == "" && c.Catalog["uri"] == "" {
		return errors.New("table.catalog: set at least type (sql, rest, hive, glue) and uri")
	}
	if c.Group == "" {
		return errors.New("kafka.group: must not be empty")
	}
	if c.TargetFileBytes < 0 {
		return fmt.Errorf("table.target_file_bytes: must be positive, got %d", c.TargetFileBytes)
	}
	return nil
}

func parseIdent(name string) (table.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return nil, fmt.Errorf("table.name %q: want namespace.table", name)
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("table.name %q: empty name part", name)
		}
	}
	return parts, nil
}

// Table is an opened floe table: its catalog, identifier and schema.
type Table struct {
	cat    catalog.Catalog
	ident  table.Identifier
	schema *schemas.Schema
	group  string
	target int64
	log    *slog.Logger
	// existing: see Config.Existing.
	existing bool
	// partitionCounts holds topic → partition count, recorded in the
	// summary of every commit (SetPartitionCount).
	partitionCounts sync.Map
	// routing holds topic → routing fingerprint, recorded in the summary
	// of every commit (SetRouting).
	routing sync.Map
	// routingSince holds topic → the offsets from which its routing
	// applies, as recorded (SetRoutingSince).
	routingSince sync.Map
	// evolveMu serializes this process's schema evolutions (Evolve), so
	// that partitions meeting the same new writer schema do not conflict.
	evolveMu sync.Mutex
	// dedupe is the business-key MERGE's setting (SetDedupe); nil: off.
	dedupe atomic.Pointer[dedupeSpec]
}

// SetPartitionCount records topic's current partition count; every later
// commit carries it in its snapshot summary, for PartitionCountOf.
func (t *Table) SetPartitionCount(topic string, n int) { t.partitionCounts.Store(topic, n) }

// SetRouting records the fingerprint of topic's routing; every later commit
// carries it in its snapshot summary, for RoutingOf.
func (t *Table) SetRouting(topic, fingerprint string) { t.routing.Store(topic, fingerprint) }

// SetRoutingSince records that the routing SetRouting gives applies to the
// table from the offsets from (per partition of topic): its watermarks where
// the routing changed. Every later commit carries them, for RoutingSinceOf;
// without a call, a commit carries those recorded with the same routing.
func (t *Table) SetRoutingSince(topic string, from map[int32]int64) {
	b, _ := json.Marshal(from) // {"partition": offset}
	t.routingSince.Store(topic, string(b))
}

// OpenCatalog loads the configured catalog, adding SQLite's WAL mode and busy
// timeout: without them concurrent commits surface "database is locked" as an
// unknown commit state. A Hive catalog makes one call at a time
// (serialCatalog); a REST catalog's client talks only to its uri's origin
// (openREST). The catalog's errors, and OpenCatalog's, do not show its
// credentials (scrubCatalog).
func OpenCatalog(ctx context.Context, props map[string]string) (catalog.Catalog, error) {
	if err := CheckCatalog(props); err != nil {
		return nil, err
	}
	p := iceberg.Properties{}
	for k, v := range props {
		p[k] = v
	}
	if t, ok := p["type"]; ok {
		// As iceberg-go's registry takes it ("Hive" is a Hive catalog,
		// which must be made serial, "SQL" one whose SQLite needs its
		// options).
		p["type"] = strings.ToLower(t)
	}
	name := catalogName(props)
	// What iceberg-go's configuration file gives the catalog, as
	// catalog.Load takes it: here, because the SQLite options below would
	// make a uri, and a REST catalog does not go through catalog.Load.
	conf := config.EnvConfig.Catalogs[name]
	for k, v := range map[string]string{"uri": conf.URI, "credential": conf.Credential, "warehouse": conf.Warehouse} {
		if p[k] == "" && v != "" {
			p[k] = v
		}
	}
	if p["type"] == "sql" && strings.EqualFold(p["sql.dialect"], "sqlite") {
		p["uri"] = sqliteURI(p["uri"])
	}
	var cat catalog.Catalog
	var err error
	var tokens *sentTokens // the bearer tokens a REST catalog's client sends
	switch {
	case isREST(p):
		tokens = new(sentTokens)
		cat, err = openREST(ctx, name, p, tokens)
	case p["type"] == "hive":
		cat, err = openHive(p)
	default:
		cat, err = loadCatalog(ctx, name, p)
	}
	secrets := catalogSecrets(p)
	if err != nil {
		what := p["type"] + " catalog"
		if p["type"] == "sql" {
			// The driver's errors do not name the database ("unable to
			// open database file").
			what += " " + redact.URL(cmp.Or(props["uri"], conf.URI))
		}
		return nil, fmt.Errorf("loading %s: %w", what, tokens.with(secrets).Error(err, 0))
	}
	if p["type"] == "hive" {
		cat = newSerialCatalog(cat, func(context.Context) (catalog.Catalog, error) { return openHive(p) })
	}
	if len(secrets) > 0 || tokens != nil {
		cat = scrubCatalog{cat, secrets, tokens}
	}
	return cat, nil
}

// CheckCatalog refuses catalog properties that cannot work, naming the
// key: no uri for a catalog type that connects to one, in the properties
// or in iceberg-go's configuration file for the catalog's name (a sql
// catalog on SQLite opened a database named "?_pragma=…" in the working
// directory and ran with it). A warehouse is not required: iceberg-go
// needs one only to place a table it creates in a namespace without a
// location, and says so then (see create).
func CheckCatalog(props map[string]string) error {
	switch typ := strings.ToLower(props["type"]); typ {
	case "sql", "rest", "http", "https", "hive":
		if props["uri"] == "" && config.EnvConfig.Catalogs[catalogName(props)].URI == "" {
			return fmt.Errorf("table.catalog.uri: required for catalog type %s", typ)
		}
	}
	return nil
}

// catalogName is the catalog's name in iceberg-go: its "name" property,
// else "floe".
func catalogName(props map[string]string) string {
	return cmp.Or(props["name"], "floe")
}

// loadCatalog is catalog.Load, tried again for up to 30 s while a SQLite
// database answers SQLITE_BUSY: processes creating one database at the
// same instant (two floe run started together) each switch it to WAL on
// their first connection, and SQLite refuses all but one of them at once,
// without waiting out busy_timeout.
func loadCatalog(ctx context.Context, name string, p iceberg.Properties) (catalog.Catalog, error) {
	deadline := time.Now().Add(30 * time.Second)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		cat, err := catalog.Load(ctx, name, p)
		if err == nil || !sqliteBusy(err) || time.Now().After(deadline) {
			return cat, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY (5), extended or
// not, as the SQLite driver returns it.
func sqliteBusy(err error) bool {
	var e interface{ Code() int }
	return errors.As(err, &e) && e.Code()&0xff == 5
}

func sqliteURI(uri string) string {
	if strings.Contains(uri, "_pragma=") {
		return uri
	}
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_txlock", "immediate")
	return uri + sep + q.Encode()
}

// checkSQLiteExists refuses a sql catalog on SQLite whose database file
// does not exist (Config.Existing): opening it would create an empty
// database, with iceberg-go's catalog tables, at a misspelt uri. A uri
// that names no file (in memory) or one it cannot tell is left to the
// driver.
func checkSQLiteExists(props map[string]string) error {
	if !strings.EqualFold(props["type"], "sql") || !strings.EqualFold(props["sql.dialect"], "sqlite") {
		return nil
	}
	uri := cmp.Or(props["uri"], config.EnvConfig.Catalogs[catalogName(props)].URI)
	path, ok := sqlitePath(uri)
	if !ok {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("table.catalog.uri %s: the SQLite database %s does not exist (floe run creates it; check the uri)", redact.URL(uri), path)
	}
	return nil
}

// sqlitePath returns the file a SQLite uri names: a path, or a file: URI
// (file:name, file:/path, file:///path, file://localhost/path), with its
// query ignored; ok is false for an in-memory database (:memory:,
// mode=memory, an empty name) and a uri it cannot read.
func sqlitePath(uri string) (path string, ok bool) {
	name, query, _ := strings.Cut(uri, "?")
	if q, err := url.ParseQuery(query); err != nil || q.Get("mode") == "memory" {
		return "", false
	}
	if rest, isURI := strings.CutPrefix(name, "file:"); isURI {
		if auth, ok := strings.CutPrefix(rest, "//"); ok {
			host, p, found := strings.Cut(auth, "/")
			if !found || (host != "" && host != "localhost") {
				return "", false
			}
			rest = "/" + p
		}
		var err error
		if name, err = url.PathUnescape(rest); err != nil {
			return "", false
		}
	}
	if name == "" || strings.HasPrefix(name, ":memory:") {
		return "", false
	}
	return name, true
}

// Open loads the catalog and the table, creating the namespace and the table
// (with the schema's partition spec and floe's write properties) on first use.
func Open(ctx context.Context, cfg Config, sc *schemas.Schema) (*Table, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger != nil {
		warnInsecureREST(cfg.Logger, cfg.Catalog)
	}
	if cfg.Existing {
		if err := checkSQLiteExists(cfg.Catalog); err != nil {
			return nil, err
		}
	}
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		return nil, err
	}
	t, err := OpenIn(ctx, cat, cfg, sc)
	if err != nil {
		if c, ok := cat.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	return t, err
}

// OpenIn is Open on an already loaded catalog (cfg.Catalog is ignored).
func OpenIn(ctx context.Context, cat catalog.Catalog, cfg Config, sc *schemas.Schema) (*Table, error) {
	cfg.Catalog = map[string]string{"type": "given"}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ident, _ := parseIdent(cfg.Table)
	t := &Table{cat: boundedCatalog{cat}, ident: ident, schema: sc, group: cfg.Group, target: cfg.TargetFileBytes, log: cfg.Logger, existing: cfg.Existing}
	if t.target == 0 {
		t.target = 256 << 20
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	// Before ensure: a schema whose own key is refused creates no table.
	if err := t.SetDedupe(SchemaDedupe(sc)); err != nil {
		return nil, fmt.Errorf("table %s: %w", cfg.Table, err)
	}
	tbl, err := t.ensure(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(tbl.Schema(), sc); err != nil {
		return nil, fmt.Errorf("table %s: %w", cfg.Table, err)
	}
	if !cfg.Existing {
		t.addTopicMetrics(ctx, tbl)
	}
	return t, nil
}

// topicMetricsKey is the table property that makes iceberg-go record the
// bounds of the topic column whole. Its default for strings, truncate(16),
// gives topics sharing their first 16 characters (prod.clickstream.web,
// prod.clickstream.app: two jobs writing one table) the same bounds, so the
// MERGE could not prune the other topic's files and compaction could not
// tell them apart.
const topicMetricsKey = table.MetricsModeColumnConfPrefix + "." + TopicColumn

// addTopicMetrics sets topicMetricsKey to full on a table created without it
// (before floe set it), when a job opens the table to write; a value someone
// set is kept. Files written from then on have exact topic bounds; older
// ones keep theirs (planCompaction handles both). A property update adds no
// snapshot, so it leaves the offset maps, and every summary floe reads,
// where they are; like a schema change, it does not make data commits
// conflict. The update is idempotent and retried on any failure; failing,
// it is logged, not fatal: exact bounds make pruning tighter, and nothing
// relies on them for correctness.
func (t *Table) addTopicMetrics(ctx context.Context, tbl *table.Table) {
	if err := t.setTopicMetrics(ctx, tbl); err != nil {
		t.log.Warn("cannot set a table property; its files keep truncated topic bounds (the MERGE prunes less)",
			"table", t.Name(), "property", topicMetricsKey, "err", err)
	}
}

func (t *Table) setTopicMetrics(ctx context.Context, tbl *table.Table) error {
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if _, ok := tbl.Properties()[topicMetricsKey]; ok {
			return nil
		}
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{topicMetricsKey: "full"}); err != nil {
			return err
		}
		_, err := tx.Commit(ctx)
		if err == nil {
			t.log.Info("table now records whole topic bounds", "table", t.Name(), "property", topicMetricsKey)
			return nil
		}
		if attempt == maxAttempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
		if tbl, err = t.Load(ctx); err != nil {
			return err
		}
	}
}

// Load reloads the table's current metadata from the catalog.
func (t *Table) Load(ctx context.Context) (*table.Table, error) {
	tbl, err := t.cat.LoadTable(ctx, t.ident)
	if err != nil {
		return nil, fmt.Errorf("loading table %s: %w", strings.Join(t.ident, "."), err)
	}
	return tbl, nil
}

// Watermarks reloads the table and returns the group's offset map.
func (t *Table) Watermarks(ctx context.Context) (Offsets, error) {
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	return WatermarksOf(tbl, t.group)
}

// PartitionCount returns the partition count of topic recorded by the newest
// commit, and false when none recorded one.
func (t *Table) PartitionCount(ctx context.Context, topic string) (int, bool, error) {
	tbl, err := t.Load(ctx)
	if err != nil {
		return 0, false, err
	}
	n, ok := PartitionCountOf(tbl, topic)
	return n, ok, nil
}

// Close releases the catalog's resources.
func (t *Table) Close() error {
	if c, ok := t.cat.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// CheckWrite writes a small probe file where the table's data files go and
// deletes it. Loading a table needs only read access, so without it a job
// whose user cannot write there (a changed ACL, a wrong hdfs.user) started
// and then failed every flush. The error names the location and the cause
// (on HDFS a permission error names the user).
func (t *Table) CheckWrite(ctx context.Context) error {
	tbl, err := t.Load(ctx)
	if err != nil {
		return err
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.Name(), err)
	}
	lp, err := tbl.LocationProvider()
	if err != nil {
		return fmt.Errorf("table %s: %w", t.Name(), err)
	}
	probe := lp.NewDataLocation("floe-write-probe-" + uuid.NewString())
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return fmt.Errorf("table %s: the file IO of %s cannot write", t.Name(), tbl.Location())
	}
	// A few bytes, so that on HDFS a DataNode is written to as well.
	if err := wfs.WriteFile(probe, []byte("floe\n")); err != nil {
		dir := probe[:strings.LastIndex(probe, "/")] // path.Dir would make file:///x file:/x
		return fmt.Errorf("table %s: cannot write its data files under %s: %w", t.Name(), dir, err)
	}
	if err := fsys.Remove(probe); err != nil {
		// Writing is what a flush needs; left behind, the probe is an
		// orphan for maintenance.
		t.log.Warn("cannot delete the write probe", "table", t.Name(), "file", probe, "err", err)
	}
	return nil
}

func (t *Table) ensure(ctx context.Context) (*table.Table, error) {
	tbl, err := t.cat.LoadTable(ctx, t.ident)
	if err == nil {
		return tbl, nil
	}
	if !errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, fmt.Errorf("loading table %s: %w", strings.Join(t.ident, "."), err)
	}
	if t.existing {
		return nil, fmt.Errorf("table %s: %w (floe run creates it; check the name and the catalog's uri and warehouse)", strings.Join(t.ident, "."), err)
	}
	// Members starting together race to create the namespace and the table,
	// and a catalog may make the loser's create fail in odd ways: Iceberg's
	// REST fixture on SQLite answers 500 with the constraint violation, and
	// the Hive Metastore deletes the database directory it made for a
	// create_database that lost the race — with the winner's new table
	// metadata in it ("file does not exist"). So a failed create is fine
	// when the object exists afterwards, and is tried again a few times.
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tbl, err = t.create(ctx)
		if err == nil || attempt == createAttempts || errors.Is(err, errNoWarehouse) {
			return tbl, err
		}
		t.log.Warn("creating the table failed; trying again", "table", strings.Join(t.ident, "."), "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		}
		backoff *= 2
	}
}

// errNoWarehouse marks a table the catalog has no place for: no warehouse
// in its properties or iceberg-go's configuration file, and a namespace
// without a location. Trying again cannot help.
var errNoWarehouse = errors.New("the catalog has no warehouse to put it in: set table.catalog.warehouse (file:///var/lib/floe/warehouse, hdfs://namenode:8020/warehouse)")

// createAttempts bounds ensure's tries to create the table;
// namespaceSettle is how long it waits after creating a Hive namespace.
const (
	createAttempts  = 5
	namespaceSettle = 2 * time.Second
)

// create creates the namespace when missing and the table, or loads the
// table another member created meanwhile.
func (t *Table) create(ctx context.Context) (*table.Table, error) {
	ns := catalog.NamespaceFromIdent(t.ident)
	if ok, err := t.cat.CheckNamespaceExists(ctx, ns); err != nil || !ok {
		if err := t.cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			if ok, cerr := t.cat.CheckNamespaceExists(ctx, ns); cerr != nil || !ok {
				return nil, fmt.Errorf("creating namespace %s: %w", strings.Join(ns, "."), err)
			}
		}
		// A Hive Metastore deletes the directory of a create_database that
		// lost a race right after the winner commits — with whatever table
		// files the winner wrote there by then. Let such a race end before
		// writing any.
		if t.cat.CatalogType() == catalog.Hive {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(namespaceSettle):
			}
		}
	}
	spec := t.schema.Spec
	tbl, err := t.cat.CreateTable(ctx, t.ident, t.schema.Iceberg,
		catalog.WithPartitionSpec(&spec), catalog.WithSortOrder(t.schema.SortOrder),
		catalog.WithProperties(tableProperties(t.schema)))
	if err != nil {
		// Another member may have created it first.
		existing, lerr := t.cat.LoadTable(ctx, t.ident)
		if lerr == nil {
			return existing, nil
		}
		// iceberg-go's error, which names no setting, has no sentinel.
		if strings.Contains(err.Error(), "no default path set") {
			err = fmt.Errorf("%w: %w", errNoWarehouse, err)
		}
		return nil, fmt.Errorf("creating table %s: %w (loading it: %v)", strings.Join(t.ident, "."), err, lerr)
	}
	t.log.Info("created table", "table", strings.Join(t.ident, "."), "location", tbl.Location())
	return tbl, nil
}

// tableProperties are the properties of a table floe creates: zstd Parquet,
// bounded metadata history, merged manifests (so scan planning stays cheap
// as commits accumulate), whole topic bounds (topicMetricsKey), and no
// Parquet dictionary for the columns where it
// costs CPU and saves nothing: 64-bit ids, counters and timestamps, and the
// schema's high-cardinality strings, which are nearly all distinct.
func tableProperties(sc *schemas.Schema) iceberg.Properties {
	props := iceberg.Properties{
		table.PropertyFormatVersion:               "2",
		table.ParquetCompressionKey:               "zstd",
		table.ParquetCompressionLevelKey:          "1",
		table.ManifestMergeEnabledKey:             "true",
		table.MetadataDeleteAfterCommitEnabledKey: "true",
		table.MetadataPreviousVersionsMaxKey:      "50",
		"floe.schema":                             sc.Name,
		topicMetricsKey:                           "full",
	}
	const noDict = "write.parquet.dict-encoding-enabled.column."
	for _, f := range sc.Iceberg.Fields() {
		switch f.Type {
		case iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.Timestamp, iceberg.PrimitiveTypes.TimestampTz:
			props[noDict+f.Name] = "false"
		}
	}
	for _, name := range sc.HighCardinality {
		props[noDict+name] = "false"
	}
	return props
}

// checkSchema rejects a table whose columns cannot hold the schema's rows,
// so a misconfigured job fails at start-up rather than at its first commit.
// A schema file that gained optional fields or wider types since the table
// was created passes: EvolveTo (floe run) applies those changes; anything
// else (a narrowing, a type change that is not a promotion) is refused
// here, naming the column and both types. Columns match by name: a file's
// field ids are positional, the table's are fixed at creation.
func checkSchema(have *iceberg.Schema, want *schemas.Schema) error {
	_, err := schemas.PlanTable(have, want)
	return err
}
