package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/internal/bytesize"
	"github.com/floe-dev/floe/internal/duration"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// Config is floe's job configuration: one YAML file (DESIGN.md,
// "Configuration contract") with ${ENV} interpolation; flags override it.
type Config struct {
	Kafka   KafkaConfig   `yaml:"kafka"`
	Schema  string        `yaml:"schema"`
	Table   TableConfig   `yaml:"table"`
	Commit  CommitConfig  `yaml:"commit"`
	Metrics MetricsConfig `yaml:"metrics"`
	// Format is how message values are encoded: json (default), avro or
	// protobuf.
	Format string `yaml:"format"`
	// Registry is the Confluent-API schema registry that avro and protobuf
	// values in the Confluent wire format name their schemas in; absent
	// means plain values (Avro written with the schema file's schema).
	Registry *schemas.RegistryConfig `yaml:"registry"`
	// Proto names the message type of plain Protobuf values (format
	// protobuf without registry): proto: {file: orders.proto, message:
	// shop.Order}.
	Proto *schemas.ProtoConfig `yaml:"proto"`
	// Enrich configures the asynchronous enrichment stage; absent means no
	// enrichment (_enrich_status is "off").
	Enrich *enrich.Config `yaml:"enrich"`
	// MemoryLimit is a soft limit for the Go runtime (debug.SetMemoryLimit):
	// the garbage collector works harder near it instead of letting the heap
	// double. 0 keeps the runtime's default (or GOMEMLIMIT). Set it to about
	// 2 × commit.max_bytes + 64MiB.
	MemoryLimit ByteSize `yaml:"memory_limit"`
	// Maintain schedules table maintenance inside `floe run` and holds the
	// defaults of `floe maintain`.
	Maintain MaintainConfig `yaml:"maintain"`
	// Dedupe overrides the schema's business-key dedupe (floe.dedupe-key);
	// absent keeps the schema's.
	Dedupe *DedupeConfig `yaml:"dedupe"`
	// Routes makes one job read several topics into several tables (see
	// RouteConfig); it replaces kafka.topic and table.name. Jobs expands it.
	Routes []RouteConfig `yaml:"routes"`

	// where is the record filter of a route with where (set by Jobs).
	where *routeFilter
	// routing is the fingerprint of the routing of a route's topic (set by
	// Jobs; see RoutingFingerprint), legacyRouting the form floe recorded
	// before (see sameRouting), and route the route's index + 1 (0: the
	// single-table form).
	routing, legacyRouting string
	route                  int
}

// DedupeConfig is the business-key MERGE: a record whose key is already in
// the table (or earlier in the flush) is skipped, like one whose offset is.
type DedupeConfig struct {
	// Key is the business-key column (payment_id, event_id); default: the
	// schema's floe.dedupe-key.
	Key string `yaml:"key"`
	// Window is how far apart in event time two copies of one key may be:
	// the search of the table is bounded by it. Default (nil) 168h (7
	// days) when the schema has an event-time column; any other requires
	// one, but 0: no window, every copy of a key counts whatever its event
	// time.
	Window *Duration `yaml:"window"`
}

// DedupeFor returns the business-key setting for schema sc: the schema's
// floe.dedupe-key with lakehouse.DefaultDedupeWindow, overridden by the
// dedupe section. Its errors name the key and the problem.
func (c Config) DedupeFor(sc *schemas.Schema) (lakehouse.Dedupe, error) {
	d, err := c.dedupeFor(sc)
	if err == nil && d.Key != "" {
		if err = sc.CheckKeyPresence(d.Key); err != nil {
			err = fmt.Errorf("dedupe.key: %w", err)
		}
	}
	return d, err
}

func (c Config) dedupeFor(sc *schemas.Schema) (lakehouse.Dedupe, error) {
	d := lakehouse.SchemaDedupe(sc)
	if c.Dedupe == nil {
		return d, nil
	}
	if c.Dedupe.Key != "" {
		d.Key = c.Dedupe.Key
	}
	if d.Key == "" {
		return d, fmt.Errorf("dedupe.key: required: schema %s declares no floe.dedupe-key", sc.Name)
	}
	f, ok := sc.Iceberg.FindFieldByName(d.Key)
	if !ok || strings.Contains(d.Key, ".") {
		return d, fmt.Errorf("dedupe.key: %q is not a top-level column of schema %s", d.Key, sc.Name)
	}
	if why := sc.AddedColumn(d.Key); why != "" {
		// Its value is shared by many records: the MERGE would keep one
		// row per value and skip the others as duplicates.
		return d, fmt.Errorf("dedupe.key: %q is %s, not a field of the record", d.Key, why)
	}
	if _, nested := f.Type.(iceberg.NestedType); nested {
		return d, fmt.Errorf("dedupe.key: column %q is a %s; want a primitive column", d.Key, f.Type)
	}
	switch w := c.Dedupe.Window; {
	case w != nil && *w == 0:
		d.Window = 0
	case w != nil:
		if sc.EventTime == "" {
			return d, fmt.Errorf("dedupe.window: %s bounds the search for key %q in event time, but schema %s declares no event-time column (floe.event-time); set the window to 0 (or remove it) to search by key alone",
				w.D(), d.Key, sc.Name)
		}
		d.Window = w.D()
	case sc.EventTime != "":
		d.Window = lakehouse.DefaultDedupeWindow
	default:
		d.Window = 0
	}
	return d, nil
}

// MaintainConfig tunes table maintenance (lakehouse.Table.Maintain):
// compaction, manifest rewrite, snapshot expiry and orphan-file removal.
type MaintainConfig struct {
	// Interval runs maintenance this often inside `floe run`; 0 (the
	// default) never does (run `floe maintain` from a scheduler instead).
	Interval Duration `yaml:"interval"`
	// TargetFileBytes is the compacted file size; 0: the table's
	// write.target-file-size-bytes, else 128 MiB.
	TargetFileBytes ByteSize `yaml:"target_file_bytes"`
	// ExpireOlderThan: snapshots older (and superseded for longer) than
	// this are expired. Default 168h (7 days).
	ExpireOlderThan Duration `yaml:"expire_older_than"`
	// RetainLast snapshots are always kept. Default 1.
	RetainLast int `yaml:"retain_last"`
	// OrphanOlderThan: unreferenced files older than this are deleted.
	// Default 72h; at least 1h.
	OrphanOlderThan Duration `yaml:"orphan_older_than"`
}

// KafkaConfig says where records come from and where bad ones go.
type KafkaConfig struct {
	Brokers []string `yaml:"brokers"`
	Topic   string   `yaml:"topic"`
	Group   string   `yaml:"group"`
	// StartOffset (earliest | latest) applies only when neither the table nor
	// the group has an offset for a partition.
	StartOffset string `yaml:"start_offset"`
	// DLQTopic receives records that cannot become rows, with the reason and
	// source coordinates in headers. Default: "<topic>.dlq".
	DLQTopic string `yaml:"dlq_topic"`
	// ClientID names floe's connections in broker logs. Default "floe".
	ClientID string `yaml:"client_id"`
	// SessionTimeout is how long the coordinator waits for a heartbeat before
	// evicting this member. Default 30s.
	SessionTimeout Duration `yaml:"session_timeout"`
	// RebalanceTimeout bounds how long members may take to rejoin, and so the
	// flush on revocation. Default 60s.
	RebalanceTimeout Duration `yaml:"rebalance_timeout"`
	// HeartbeatInterval must be well under SessionTimeout. Default 3s.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// MaxMessageBytes: larger values are dead-lettered as too_large. Default 1 MiB.
	MaxMessageBytes ByteSize `yaml:"max_message_bytes"`
	// FetchMaxBytes bounds one fetch response per partition. Default 1 MiB,
	// at most 1 GiB (maxFetchBytes).
	FetchMaxBytes ByteSize `yaml:"fetch_max_bytes"`
	// SASL authenticates to the brokers; absent means none.
	SASL *SASLConfig `yaml:"sasl"`
	// TLS encrypts the connections to the brokers; absent means plaintext.
	TLS *TLSConfig `yaml:"tls"`
}

// TableConfig names the Iceberg table and its catalog.
type TableConfig struct {
	Name string `yaml:"name"`
	// Catalog is handed to iceberg-go's catalog.Load as properties.
	Catalog map[string]string `yaml:"catalog"`
	// TargetFileBytes bounds one data file. Default 256 MiB.
	TargetFileBytes ByteSize `yaml:"target_file_bytes"`
}

// CommitConfig says when buffered records are flushed: whichever of the
// interval, the record count or the buffered bytes comes first.
type CommitConfig struct {
	Interval   Duration `yaml:"interval"`    // default 10s
	MaxRecords int      `yaml:"max_records"` // default 500000
	MaxBytes   ByteSize `yaml:"max_bytes"`   // default 128 MiB
	// Grace bounds the final flush on revocation or shutdown; after it the
	// buffer is dropped and the partition's next owner redoes it. It must be
	// below kafka.session_timeout and kafka.rebalance_timeout. Default: the
	// least of 20s and half of each.
	Grace Duration `yaml:"grace"`
}

// Below these, commit.max_bytes and commit.max_records are warned about
// at start-up (warnTiny): a table commit (a snapshot and a data file per
// partition) per few records. Such values are kept, since tests use them,
// but in a job they are usually a unit left off: max_bytes: 128 is 128
// bytes, not MiB.
const (
	tinyCommitBytes   = 1 << 20
	tinyCommitRecords = 100
)

// warnTiny logs, once at start-up, a commit.max_bytes or
// commit.max_records so small that nearly every record makes a flush.
func (c CommitConfig) warnTiny(log *slog.Logger) {
	if c.MaxBytes > 0 && c.MaxBytes < tinyCommitBytes {
		log.Warn("commit.max_bytes is below 1MiB: a table commit every few records (a size without a unit is bytes; write 128MiB)",
			"commit.max_bytes", int64(c.MaxBytes))
	}
	if c.MaxRecords > 0 && c.MaxRecords < tinyCommitRecords {
		log.Warn("commit.max_records is below 100: a table commit (a snapshot, a data file per partition) every few records",
			"commit.max_records", c.MaxRecords)
	}
}

// warnTiny logs, once at start-up, settings so small they are usually a
// unit left off (memory_limit: 512 is 512 bytes) and make the job crawl or
// dead-letter everything: commit.max_bytes and commit.max_records (see
// CommitConfig.warnTiny), memory_limit below 64MiB (the collector runs
// without pause), kafka.max_message_bytes below 1KiB (nearly every record
// a dead letter), kafka.heartbeat_interval below 100ms, and a
// target_file_bytes below 1MiB (a data file every few records).
func (c Config) warnTiny(log *slog.Logger) {
	c.Commit.warnTiny(log)
	for _, s := range []struct {
		key, why  string
		v, bound  int64
		threshold string
	}{
		{"memory_limit", "the garbage collector runs without pause", int64(c.MemoryLimit), 64 << 20, "64MiB"},
		{"kafka.max_message_bytes", "larger records are dead letters", int64(c.Kafka.MaxMessageBytes), 1 << 10, "1KiB"},
		{"table.target_file_bytes", "a data file every few records", int64(c.Table.TargetFileBytes), 1 << 20, "1MiB"},
		{"maintain.target_file_bytes", "compaction writes files of a few records", int64(c.Maintain.TargetFileBytes), 1 << 20, "1MiB"},
	} {
		if s.v > 0 && s.v < s.bound {
			log.Warn(s.key+" is below "+s.threshold+": "+s.why+" (a size without a unit is bytes; write 512MiB)", s.key, s.v)
		}
	}
	if h := c.Kafka.HeartbeatInterval.D(); h > 0 && h < 100*time.Millisecond {
		log.Warn("kafka.heartbeat_interval is below 100ms: a heartbeat request to the coordinator that often (a duration needs a unit: 3s)",
			"kafka.heartbeat_interval", h)
	}
}

// MetricsConfig configures the HTTP endpoint for /metrics, /livez, /readyz.
type MetricsConfig struct {
	Listen string `yaml:"listen"` // empty: no endpoint
}

// Duration is a time.Duration written as "10s" in YAML (0 and -1 need no
// unit).
type Duration = duration.Duration

// ByteSize is a size written as 1048576, "512KiB", "4MiB" or "1GiB" in YAML.
type ByteSize = bytesize.Size

// maxFetchBytes bounds kafka.fetch_max_bytes. kafka-go refuses every fetch
// above just under 2 GiB (a fetch request's sizes are int32) with an error
// its reader logs and retries without end: run, replay and verify waited
// silently. Brokers cap a fetch at their fetch.max.bytes (55 MiB by
// default) anyway.
const maxFetchBytes = 1 << 30

// envRef matches a reference, ${NAME} or ${NAME:-default}, or $${, which
// stands for a literal ${.
var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// envRefs are the ${NAME} and ${NAME:-default} references of a config
// file (and its $${ escapes), each replaced in its text by a placeholder
// of letters and digits before the YAML is parsed: a reference then parses
// as the word it is written as (also in a flow sequence, [${BROKERS}]),
// and the values replacing the placeholders afterwards (interpolate) are
// never YAML syntax, so a secret holding "#", "*", "!", quotes or
// backslashes reaches its key whole and cannot appear in a parse error.
type envRefs struct {
	token *regexp.Regexp // a placeholder; its group is the reference's index
	refs  [][]string     // envRef's submatches of each reference (or escape)
}

// placeholders returns raw with its references replaced by placeholders.
func placeholders(raw []byte) ([]byte, *envRefs) {
	prefix := "FLOEENV"
	for bytes.Contains(raw, []byte(prefix)) {
		prefix += "X"
	}
	r := &envRefs{token: regexp.MustCompile(prefix + `(\d+)Z`)}
	out := envRef.ReplaceAllFunc(raw, func(m []byte) []byte {
		g := envRef.FindStringSubmatch(string(m))
		if strings.Contains(g[3], "${") {
			// ${A:-${B}}: a reference in a default is not one (the
			// default ends at the first brace); left as written, it is
			// refused as malformed rather than read as the text ${B.
			return m
		}
		r.refs = append(r.refs, g)
		return fmt.Appendf(nil, "%s%dZ", prefix, len(r.refs)-1)
	})
	return out, r
}

// interpolate replaces the placeholders in the scalars of the parsed YAML
// n by their references' values: the variable's, or the default when it is
// unset or empty. A plain value is resolved again once replaced (${PORT}
// may be a number); a quoted one stays a string. References in comments
// are ignored. Unset variables without a default are appended to missing,
// so that the error names them rather than an empty string surfacing
// later as a confusing connection error. A ${ that starts no reference
// (${NAME-default}, ${NAME:=default}, ${ NAME }) is appended to malformed
// with its line: it reached its key as the literal text.
func (r *envRefs) interpolate(n *yaml.Node, missing, malformed *[]string) {
	for _, c := range n.Content {
		r.interpolate(c, missing, malformed)
	}
	if n.Kind != yaml.ScalarNode {
		return
	}
	if i := strings.Index(n.Value, "${"); i >= 0 {
		// The text up to its closing brace, references in it written
		// as they were.
		text, _, _ := strings.Cut(n.Value[i:], "\n")
		if j := strings.IndexByte(text, '}'); j >= 0 {
			text = text[:j+1]
		}
		text = r.token.ReplaceAllStringFunc(text, func(m string) string { return r.ref(m)[0] })
		*malformed = append(*malformed, fmt.Sprintf("line %d: %.64s", n.Line, text))
	}
	if len(r.refs) == 0 {
		return
	}
	v := r.token.ReplaceAllStringFunc(n.Value, func(m string) string {
		g := r.ref(m)
		if g[1] == "" {
			return "${" // $${
		}
		v, ok := os.LookupEnv(g[1])
		switch {
		case ok && (v != "" || g[2] == ""):
			return v
		case g[2] != "":
			return g[3]
		}
		if !slices.Contains(*missing, g[1]) { // named once, however often it is referenced
			*missing = append(*missing, g[1])
		}
		return g[0]
	})
	if v != n.Value && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		n.Tag = "" // resolved again when decoded
	}
	n.Value = v
}

// ref returns envRef's submatches of the reference placeholder m stands for.
func (r *envRefs) ref(m string) []string {
	i, _ := strconv.Atoi(r.token.FindStringSubmatch(m)[1])
	return r.refs[i]
}

// LoadConfig reads, interpolates and parses a YAML config file. Unknown keys
// are errors, so a typo cannot silently fall back to a default. It does not
// apply defaults or validate; call Finish after applying flag overrides.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	text, refs := placeholders(raw)
	var doc yaml.Node
	docs := yaml.NewDecoder(bytes.NewReader(text))
	if err := docs.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	// A further document (after ---) would be dropped without a word; an
	// empty one (a trailing ---, one of comments only) holds nothing.
	for {
		var more yaml.Node
		err := docs.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
		if len(more.Content) > 0 && more.Content[0].ShortTag() != "!!null" {
			return cfg, fmt.Errorf("config %s: more than one YAML document (a --- line): floe reads one", path)
		}
	}
	var missing, malformed []string
	refs.interpolate(&doc, &missing, &malformed)
	if len(malformed) > 0 {
		return cfg, fmt.Errorf("config %s: ${ starts no reference floe replaces (${NAME} or ${NAME:-default}; $${ for a literal ${): %s", path, strings.Join(malformed, "; "))
	}
	if len(missing) > 0 {
		return cfg, fmt.Errorf("config %s: environment variables not set: %s", path, strings.Join(missing, ", "))
	}
	if doc.Kind == 0 {
		return cfg, nil // an empty file
	}
	if err := emptySections(&doc, ""); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := doc.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	// Unknown keys: yaml.Node.Decode cannot refuse them, so the document
	// is encoded again (quoting what needs it) for a decoder that does.
	// Its line numbers are that text's, not the file's: they are dropped.
	if raw, err = yaml.Marshal(&doc); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var check Config
	if err := dec.Decode(&check); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for i, e := range te.Errors {
				te.Errors[i] = yamlLine.ReplaceAllString(e, "")
			}
		}
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// emptySections refuses a section key written without a value (every
// setting under it commented out, or a template that rendered nothing),
// which YAML reads as absent: kafka.tls and kafka.sasl (the connections
// would be plaintext, or unauthenticated, while the file seems to ask for
// TLS or SASL), and enrich, registry and dedupe, at the top level or in a
// route, and routes (the job would run without enrichment, read plain
// values, keep the schema's business key, or read kafka.topic). path is
// n's dotted path.
func emptySections(n *yaml.Node, path string) error {
	if n.Kind == yaml.DocumentNode || n.Kind == yaml.SequenceNode {
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p += "[" + strconv.Itoa(i) + "]"
			}
			if err := emptySections(c, p); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	// The top level, or a route (routes[i]).
	job := path == "" || (strings.HasPrefix(path, "routes[") && !strings.Contains(path, "."))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		p := strings.TrimPrefix(path+"."+k, ".")
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			if path == "kafka" || strings.HasSuffix(path, ".kafka") {
				switch k {
				case "tls":
					return fmt.Errorf("%s has no value: write tls: {} for TLS with the system's roots, or remove the key for plaintext", p)
				case "sasl":
					return fmt.Errorf("%s has no value: write its mechanism, username and password, or remove the key for no SASL", p)
				}
			}
			if job {
				// What an absent key means: a route inherits the top
				// level's section.
				absent := map[string]string{"enrich": "no enrichment", "registry": "plain values", "dedupe": "the schema's floe.dedupe-key"}[k]
				if path != "" {
					absent = "the top level's " + k
				}
				switch k {
				case "enrich":
					return fmt.Errorf("%s has no value: write its url, key and fields, or remove the key for %s", p, absent)
				case "registry":
					return fmt.Errorf("%s has no value: write its url, or remove the key for %s", p, absent)
				case "dedupe":
					return fmt.Errorf("%s has no value: write its key (and window), or remove the key for %s", p, absent)
				}
			}
			if path == "" && k == "routes" {
				return fmt.Errorf("%s has no value: list the routes, or remove the key to read kafka.topic into table.name", p)
			}
		}
		if err := emptySections(v, p); err != nil {
			return err
		}
	}
	return nil
}

// yamlLine is the position yaml.v3 puts before each of its errors.
var yamlLine = regexp.MustCompile(`^line \d+: `)

// SchemaFormat is the message format the schema's builders decode.
func (c Config) SchemaFormat() schemas.Format {
	return schemas.Format{Kind: c.Format, Registry: c.Registry, Proto: c.Proto}
}

// Finish applies defaults and validates; errors name the offending key.
func (c *Config) Finish() error {
	c.defaults()
	var err error
	if c.Routed() {
		err = c.validateRoutes()
	} else {
		err = c.validate()
	}
	if c.Enrich != nil {
		err = errors.Join(err, c.Enrich.Finish())
	}
	return err
}

// CheckMember checks what NewMember refuses beyond Finish, reading the
// files the configuration names: the format's settings (the registry's,
// the proto file: schemas.Schema.WithFormat) and the enrichment's TLS
// files and cache file (enrich.Config.CheckFiles). sc is the job's schema
// (WithEnrichment applied). floe run calls it for every route before it
// opens any table, so that a refused configuration creates none; NewMember
// runs once the table is open.
func (c Config) CheckMember(sc *schemas.Schema) error {
	return c.checkStage(sc, c.Enrich)
}

// checkStage checks the format's settings and the files of e, the
// enrichment stage's configuration (nil: none).
func (c Config) checkStage(sc *schemas.Schema, e *enrich.Config) error {
	_, err := sc.WithFormat(c.SchemaFormat())
	if e != nil {
		err = errors.Join(err, e.CheckFiles())
	}
	return err
}

func (c *Config) defaults() {
	k := &c.Kafka
	// One entry may hold a comma-separated list, as a variable such as
	// ${KAFKA_BROKERS} usually does (kafka-go crashed on such an address).
	var brokers []string
	for _, b := range k.Brokers {
		for part := range strings.SplitSeq(b, ",") {
			if part = strings.TrimSpace(part); part != "" {
				brokers = append(brokers, part)
			}
		}
	}
	k.Brokers = brokers
	if k.StartOffset == "" {
		k.StartOffset = "earliest"
	}
	if k.DLQTopic == "" && k.Topic != "" {
		k.DLQTopic = k.Topic + ".dlq"
	}
	if k.ClientID == "" {
		k.ClientID = "floe"
	}
	if k.SessionTimeout == 0 {
		k.SessionTimeout = Duration(30 * time.Second)
	}
	if k.RebalanceTimeout == 0 {
		k.RebalanceTimeout = Duration(60 * time.Second)
	}
	if k.HeartbeatInterval == 0 {
		k.HeartbeatInterval = Duration(3 * time.Second)
	}
	if k.MaxMessageBytes == 0 {
		k.MaxMessageBytes = 1 << 20
	}
	if k.FetchMaxBytes == 0 {
		k.FetchMaxBytes = 1 << 20
	}
	if c.Schema == "" {
		c.Schema = "clickstream"
	}
	if c.Format == "" {
		c.Format = schemas.FormatJSON
	}
	if c.Table.TargetFileBytes == 0 {
		c.Table.TargetFileBytes = 256 << 20
	}
	if c.Commit.Interval == 0 {
		c.Commit.Interval = Duration(10 * time.Second)
	}
	if c.Commit.MaxRecords == 0 {
		c.Commit.MaxRecords = 500000
	}
	if c.Commit.MaxBytes == 0 {
		c.Commit.MaxBytes = 128 << 20
	}
	if c.Commit.Grace == 0 && k.SessionTimeout > 0 && k.RebalanceTimeout > 0 { // else validate names the timeout
		c.Commit.Grace = Duration(min(20*time.Second, k.SessionTimeout.D()/2, k.RebalanceTimeout.D()/2))
	}
	if c.Maintain.ExpireOlderThan == 0 {
		c.Maintain.ExpireOlderThan = Duration(7 * 24 * time.Hour)
	}
	if c.Maintain.RetainLast == 0 {
		c.Maintain.RetainLast = 1
	}
	if c.Maintain.OrphanOlderThan == 0 {
		c.Maintain.OrphanOlderThan = Duration(72 * time.Hour)
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Format {
	case schemas.FormatJSON:
		if c.Registry != nil {
			bad("registry", "JSON values do not use a schema registry; set format to avro or protobuf, or remove registry")
		}
	case schemas.FormatAvro:
	case schemas.FormatProtobuf:
		switch {
		case c.Registry == nil && c.Proto == nil:
			bad("format", "protobuf values need their message type: set proto.file and proto.message (plain values) or registry (Confluent wire format)")
		case c.Registry != nil && c.Proto != nil:
			bad("proto", "the registry names each message's type; remove proto or registry")
		}
	default:
		bad("format", "%q: want json, avro or protobuf", c.Format)
	}
	if c.Proto != nil && c.Format != schemas.FormatProtobuf {
		bad("proto", "goes with format protobuf")
	}
	if c.Registry != nil && c.Registry.URL == "" {
		bad("registry.url", "required")
	}
	if c.Enrich != nil && c.Format != schemas.FormatJSON {
		bad("enrich", "the lookup key is read from JSON values; enrichment of %s values is not supported yet", c.Format)
	}
	k := c.Kafka
	if len(k.Brokers) == 0 {
		bad("kafka.brokers", "at least one broker address is required")
	}
	for _, b := range k.Brokers {
		if err := brokerAddr(b); err != nil {
			bad("kafka.brokers", "%q: %v (want host:port)", b, err)
		}
	}
	if k.Topic == "" {
		bad("kafka.topic", "required")
	}
	if k.Group == "" {
		bad("kafka.group", "required")
	}
	if k.StartOffset != "earliest" && k.StartOffset != "latest" {
		bad("kafka.start_offset", "%q: want earliest or latest", k.StartOffset)
	}
	if k.DLQTopic == k.Topic && k.Topic != "" {
		bad("kafka.dlq_topic", "must differ from kafka.topic")
	}
	// kafka-go refuses these only after the table exists, naming no key;
	// the group protocol carries them as int32 milliseconds.
	timeouts := true
	for _, d := range []struct {
		key string
		v   Duration
	}{{"kafka.session_timeout", k.SessionTimeout}, {"kafka.rebalance_timeout", k.RebalanceTimeout}, {"kafka.heartbeat_interval", k.HeartbeatInterval}} {
		if d.v.D() <= 0 || d.v.D()/time.Millisecond >= math.MaxInt32 {
			bad(d.key, "%s: want a positive duration below %s", d.v.D(), time.Duration(math.MaxInt32)*time.Millisecond)
			timeouts = false
		}
	}
	if timeouts && k.HeartbeatInterval.D() >= k.SessionTimeout.D() {
		bad("kafka.heartbeat_interval", "%s must be below kafka.session_timeout %s", k.HeartbeatInterval.D(), k.SessionTimeout.D())
	}
	if k.FetchMaxBytes > maxFetchBytes {
		bad("kafka.fetch_max_bytes", "%d is above the 1GiB a fetch may ask for", k.FetchMaxBytes)
	}
	if _, err := k.security(); err != nil {
		errs = append(errs, err)
	}
	if c.Table.Name == "" {
		bad("table.name", "required (namespace.table)")
	} else if !strings.Contains(c.Table.Name, ".") {
		bad("table.name", "%q: want namespace.table", c.Table.Name)
	}
	if c.Table.Catalog["type"] == "" {
		bad("table.catalog.type", "required (sql, rest, hive, glue)")
	}
	if err := lakehouse.CheckCatalog(c.Table.Catalog); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	if c.Commit.MaxRecords < 0 {
		bad("commit.max_records", "must be positive")
	}
	if c.Commit.MaxBytes > 1<<30 {
		bad("commit.max_bytes", "%d is above the 1GiB a flush may buffer", c.Commit.MaxBytes)
	}
	if c.Commit.Interval.D() < 0 {
		bad("commit.interval", "must be positive")
	}
	// A negative grace would cancel the final flush at once: SIGTERM
	// would drop the buffer.
	switch limit := min(k.SessionTimeout.D(), k.RebalanceTimeout.D()); {
	case c.Commit.Grace.D() < 0:
		bad("commit.grace", "%s: must be positive", c.Commit.Grace.D())
	case timeouts && c.Commit.Grace.D() >= limit:
		bad("commit.grace", "%s must be below kafka.session_timeout and kafka.rebalance_timeout (%s): a revoked member stops heartbeating, and the coordinator evicts it after the session timeout",
			c.Commit.Grace.D(), limit)
	}
	if l := c.Metrics.Listen; l != "" {
		// net.Listen refused it only once the member was built, after the
		// table was created.
		if _, port, err := net.SplitHostPort(l); err != nil {
			bad("metrics.listen", "%q: want host:port, or :port for every interface", l)
		} else if _, err := net.LookupPort("tcp", port); err != nil {
			bad("metrics.listen", "%q: %v", l, err)
		}
	}
	mt := c.Maintain
	if mt.Interval.D() < 0 {
		bad("maintain.interval", "must be positive (0: no maintenance inside floe run)")
	}
	if mt.ExpireOlderThan.D() < 0 {
		bad("maintain.expire_older_than", "must be positive")
	}
	if mt.RetainLast < 1 {
		bad("maintain.retain_last", "%d: at least 1 snapshot is always kept", mt.RetainLast)
	}
	if c.Dedupe != nil && c.Dedupe.Window != nil && c.Dedupe.Window.D() < 0 {
		bad("dedupe.window", "must be positive (or 0: no window)")
	}
	if mt.OrphanOlderThan.D() < time.Hour {
		bad("maintain.orphan_older_than", "%s is below 1h: younger unreferenced files may belong to a commit in flight", mt.OrphanOlderThan.D())
	}
	return errors.Join(errs...)
}

// brokerAddr checks a broker address: host:port, the port a number from 1
// to 65535. "host:" and "kafka://host:9092" passed a check for a colon and
// failed only when the member connected.
func brokerAddr(b string) error {
	host, port, err := net.SplitHostPort(b)
	switch {
	case err != nil && !strings.Contains(b, ":"):
		return errors.New("no port")
	case err != nil:
		return errors.New("not an address (no scheme such as kafka://)")
	case host == "":
		return errors.New("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
