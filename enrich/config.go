package enrich

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/internal/bytesize"
	"github.com/floe-dev/floe/internal/duration"
	"github.com/floe-dev/floe/internal/redact"
)

// FieldType is the type an enrichment attribute takes in the table. The
// service's JSON is converted to it; a value that cannot be converted
// becomes a null (and is counted in floe_enrich_attribute_errors_total).
type FieldType string

// The field types a lookup result can be mapped to, with the Go type each
// takes in Values.
const (
	TypeString    FieldType = "string"    // string, UTF-8 only; a JSON number or bool is kept as its text
	TypeLong      FieldType = "long"      // int64; a whole JSON number (42.0 too), or a string spelling one
	TypeDouble    FieldType = "double"    // float64; a JSON number, or a string spelling one
	TypeBoolean   FieldType = "boolean"   // bool; JSON true/false or "true"/"false"
	TypeTimestamp FieldType = "timestamp" // time.Time in UTC; an RFC 3339 string or epoch milliseconds
)

// Field maps one attribute of the service's answer to one table column.
type Field struct {
	// Name is the column name.
	Name string `yaml:"name"`
	// Type is the column type.
	Type FieldType `yaml:"type"`
	// Attribute is the key in the service's attribute object. Default: Name.
	Attribute string `yaml:"attribute"`
}

// Policy says what happens to lookups while the circuit breaker is open or
// a request has failed for good.
type Policy string

// The breaker policies (see the package documentation).
const (
	// PolicyPause holds lookups until the service answers again: lanes fill,
	// Submit blocks and the pipeline stops fetching. Nothing is lost.
	PolicyPause Policy = "pause"
	// PolicyPassthrough completes lookups without enrichment: StatusSkipped
	// while the breaker is open, StatusError after a failed request.
	PolicyPassthrough Policy = "passthrough"
	// PolicyDLQ completes lookups with StatusDead so that the caller routes
	// the records to the dead-letter topic.
	PolicyDLQ Policy = "dlq"
)

// Modes of talking to the service.
const (
	ModeBatch  = "batch"  // POST {"keys":[...]} to URL
	ModeSingle = "single" // GET URL with {key} replaced by the escaped key
)

// TLSConfig configures HTTPS to the service. All files are PEM.
type TLSConfig struct {
	// CAFile holds the certificates that may sign the service's certificate,
	// in addition to the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key, for services
	// that require mutual TLS. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// InsecureSkipVerify accepts any server certificate. For tests only; it
	// is warned about at start-up.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// BreakerConfig configures the circuit breaker around the service.
type BreakerConfig struct {
	// Policy while the breaker is open: pause (default), passthrough or dlq.
	Policy Policy `yaml:"policy"`
	// FailureRatio of failed requests (after their retries) within Interval
	// that opens the breaker. Default 0.5.
	FailureRatio float64 `yaml:"failure_ratio"`
	// MinRequests is the number of finished requests within Interval before
	// FailureRatio is judged, so that one failure at start-up does not open
	// the breaker. Default 10.
	MinRequests uint32 `yaml:"min_requests"`
	// OpenTimeout is how long the breaker stays open before it lets one
	// probe request through (half-open). Default 5s.
	OpenTimeout Duration `yaml:"open_timeout"`
	// Interval is the rolling window over which failures are counted while
	// the breaker is closed. A request's outcome counts in the window it
	// began in (gobreaker), so Interval must exceed the longest a request
	// may take, RequestSpan: one that outlasts it is never counted, and a
	// service that hangs would never open the breaker. Default twice that,
	// at least 10s (56s with the other defaults).
	Interval Duration `yaml:"interval"`
}

// Duration is a time.Duration written as "5s" in YAML (0 and -1 need no
// unit).
type Duration = duration.Duration

// RetryCount is a number of retries. Its zero value is the default, as
// every field's of Config is, but "retries: 0" in YAML means no retries —
// what one writes for a service that must not see a request twice, beside
// hedge_after: -1 — so it is read as -1.
type RetryCount int

// UnmarshalYAML reads an integer; 0 becomes -1 (none).
func (r *RetryCount) UnmarshalYAML(n *yaml.Node) error {
	var v int
	if err := n.Decode(&v); err != nil {
		return err
	}
	if v == 0 {
		v = -1
	}
	*r = RetryCount(v)
	return nil
}

// Config is the `enrich:` section of floe's configuration. The zero value of
// every field means its documented default; Finish applies them.
type Config struct {
	// URL of the lookup endpoint. In single mode it must contain {key}.
	URL string `yaml:"url"`
	// Mode is batch (default) or single.
	Mode string `yaml:"mode"`
	// Key is the record's JSON field whose value is looked up, e.g. user_id.
	// The pipeline extracts it; records without it are StatusMiss.
	Key string `yaml:"key"`
	// Fields are the attributes kept, in column order.
	Fields []Field `yaml:"fields"`

	// BatchSize is the most keys in one batch request. Default 500.
	BatchSize int `yaml:"batch_size"`
	// Linger is how long a partial batch waits for more keys. Default 5ms;
	// -1 sends each partial batch at once.
	Linger Duration `yaml:"linger"`
	// MaxInFlightRecords bounds the records one lane (partition) holds
	// between Submit and Out; Submit blocks beyond it. Default 100000.
	MaxInFlightRecords int `yaml:"max_in_flight_records"`
	// MaxInFlightBytes bounds the bytes one lane holds between Submit and
	// Out, as sized by the caller (SubmitSized; the pipeline counts a
	// record's key and value plus 192 bytes of overhead). A lane always
	// admits one record. 0 means 64 MiB; -1 means no byte bound.
	MaxInFlightBytes bytesize.Bound `yaml:"max_in_flight_bytes"`
	// MaxInFlightBytesTotal bounds the bytes all lanes together hold, as
	// sized like MaxInFlightBytes: lanes waiting on cold keys share it, so
	// a few of them can run far ahead while the total stays bounded. A
	// lane's first 1024 records (the ones that keep it moving while nothing
	// in it waits) may also use a reserve of the same size, so that lanes
	// behind cold keys cannot starve the others: the lanes together hold at
	// most twice it, plus one record and 64 KiB per lane (which lanes tell
	// the bound in batches). With hundreds of partitions their first
	// records alone may fill it, and lanes then no longer run ahead. 0
	// means 128 MiB; -1 means no stage-wide bound.
	MaxInFlightBytesTotal bytesize.Bound `yaml:"max_in_flight_bytes_total"`
	// MaxInFlightRequests bounds the requests in flight for the whole stage,
	// and again those of batches split under the pause policy to isolate a
	// key the service cannot answer. Default 256.
	MaxInFlightRequests int `yaml:"max_in_flight_requests"`

	// Timeout bounds one HTTP attempt. Default 5s.
	Timeout Duration `yaml:"timeout"`
	// Retries after the first attempt, for retryable failures only. Default
	// 3; -1 means none, and so does an explicit 0 in YAML (see RetryCount).
	// A 429 or 503 whose Retry-After asks for longer than BackoffMax is not
	// retried within its request: the request fails at once, so that it
	// stays within RequestSpan and the breaker counts it, and its batch asks
	// again once the wait is over (under passthrough and dlq, while Retries
	// remain).
	Retries RetryCount `yaml:"retries"`
	// HedgeAfter is how long an attempt waits before the same request is
	// sent once more, the first answer winning ("hedged requests", The Tail
	// at Scale): under ordered completion a lane waits for the slowest
	// lookup among its records, so the service's tail latency, not its
	// median, sets how long lanes stall on a cold cache. 0 (default) adapts
	// it to twice the median latency of the last 64 requests, so about one
	// request in seven is hedged at the reference latencies, and none until
	// 8 have been answered; a negative value never hedges. A hedge is one
	// more request in flight beyond max_in_flight_requests, at most one per
	// request, and at most a fifth of the requests are hedged (after a
	// burst of 10), so a service that slows down as a whole does not get
	// twice the load.
	HedgeAfter Duration `yaml:"hedge_after"`
	// BackoffMin and BackoffMax bound the exponential backoff between
	// attempts; each wait is drawn uniformly below the bound (full jitter).
	// Defaults 100ms and 2s.
	BackoffMin Duration `yaml:"backoff_min"`
	BackoffMax Duration `yaml:"backoff_max"`

	// CacheSize bounds the cached keys (results and misses). Default
	// 200000; -1 disables the cache; below 32 the bound is 32 (16 shards
	// of two generations each hold at least one entry). Budget about 270 bytes per entry with
	// six attributes (BenchmarkCacheEntryBytes): the default may reach
	// ~55 MB, a small share of a 1 GiB budget.
	CacheSize int `yaml:"cache_size"`
	// CacheMaxBytes bounds the cache's memory, as estimated per entry (its
	// key, its strings, its attributes, the map's slot): a service that
	// answers with long strings would otherwise fill the memory long before
	// CacheSize keys. An answer larger than 1/32 of it (a generation of one
	// of the cache's 16 shards) is not cached: its key is looked up again
	// whenever a record needs it. 0 means DefaultCacheMaxBytes (256 MiB).
	CacheMaxBytes bytesize.Size `yaml:"cache_max_bytes"`
	// CacheTTL is how long a result is used. Default 10m. Hot keys are
	// refreshed in the background after 80% of it, so they never stall a
	// lane.
	CacheTTL Duration `yaml:"cache_ttl"`
	// NegativeCacheTTL is how long a miss is remembered. Default 1m.
	NegativeCacheTTL Duration `yaml:"negative_cache_ttl"`
	// CacheFile, if set, is where the cache is saved when the job stops
	// and loaded from when it starts, so that a scheduled job's next run
	// starts with the keys its last run looked up rather than with a cold
	// start. An entry keeps its expiry (CacheTTL or NegativeCacheTTL from
	// its lookup, whichever run made it), but no more than those settings
	// now allow. A file saved for another key field, other fields, or
	// against another URL or mode, or one that is not whole or was damaged
	// (its checksum does not match), is ignored: delete it when the
	// service's answers change under the same URL. Each job (each route,
	// each member on a host) needs a file of its own. It holds the
	// attributes, so it is written readable by its owner only. floe replay
	// neither reads nor writes it. Its directory must exist and be
	// writable, and the path, if it exists, must be a regular file (a link
	// to one is read, then replaced by the save).
	CacheFile string `yaml:"cache_file"`

	// AuthHeader is sent with every request, as "Name: value", e.g.
	// "Authorization: Bearer ${TOKEN}". It is never logged nor put in
	// errors.
	AuthHeader string `yaml:"auth_header"`
	// TLS configures HTTPS.
	TLS TLSConfig `yaml:"tls"`
	// Breaker configures the circuit breaker.
	Breaker BreakerConfig `yaml:"breaker"`
}

// Finish applies the defaults and validates. Errors name the offending key as
// "enrich.<key>: ..."; all problems are reported at once.
func (c *Config) Finish() error {
	c.defaults()
	return c.validate()
}

func (c *Config) defaults() {
	if c.Mode == "" {
		c.Mode = ModeBatch
	}
	for i := range c.Fields {
		if c.Fields[i].Attribute == "" {
			c.Fields[i].Attribute = c.Fields[i].Name
		}
	}
	setDefault(&c.BatchSize, 500)
	setDefault(&c.Linger, Duration(5*time.Millisecond))
	setDefault(&c.MaxInFlightRecords, 100000)
	setDefault(&c.MaxInFlightRequests, 256)
	setDefault(&c.Timeout, Duration(5*time.Second))
	setDefault(&c.Retries, 3)
	setDefault(&c.BackoffMin, Duration(100*time.Millisecond))
	setDefault(&c.BackoffMax, Duration(2*time.Second))
	setDefault(&c.CacheSize, 200_000)
	setDefault(&c.CacheTTL, Duration(10*time.Minute))
	setDefault(&c.NegativeCacheTTL, Duration(time.Minute))
	b := &c.Breaker
	if b.Policy == "" {
		b.Policy = PolicyPause
	}
	setDefault(&b.FailureRatio, 0.5)
	setDefault(&b.MinRequests, 10)
	setDefault(&b.OpenTimeout, Duration(5*time.Second))
	setDefault(&b.Interval, Duration(max(10*time.Second, 2*min(c.RequestSpan(), math.MaxInt64/2))))
}

// RequestSpan is the longest one lookup request may take: every attempt
// timing out, with the longest backoff after each (a Retry-After longer
// than BackoffMax ends the request instead of being waited within it; see
// Retries). It stops at the longest time.Duration (which validate
// refuses): a huge timeout or retry count overflowed it, negative or
// small, past the breaker.interval check.
func (c *Config) RequestSpan() time.Duration {
	timeout, backoff := max(c.Timeout.D(), 0), max(c.BackoffMax.D(), 0)
	if backoff > math.MaxInt64-timeout {
		return math.MaxInt64
	}
	attempt := timeout + backoff
	retries := time.Duration(max(c.Retries, 0))
	if attempt > 0 && retries >= math.MaxInt64/attempt {
		return math.MaxInt64
	}
	return (retries + 1) * attempt
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("enrich.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.URL == "" {
		bad("url", "required")
	} else if u, err := url.Parse(strings.ReplaceAll(c.URL, "{key}", "k")); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("url", "%q: want an absolute http:// or https:// URL", redactURL(c.URL))
	}
	switch c.Mode {
	case ModeBatch:
		if strings.Contains(c.URL, "{key}") {
			bad("url", "contains {key}, which only mode single uses")
		}
	case ModeSingle:
		if !strings.Contains(c.URL, "{key}") {
			bad("url", "mode single needs {key} in the URL, e.g. http://host/lookup/{key}")
		}
	default:
		bad("mode", "%q: want batch or single", c.Mode)
	}
	if c.Key == "" {
		bad("key", "required: the record field to look up, e.g. user_id")
	}
	if len(c.Fields) == 0 {
		bad("fields", "at least one field is required")
	}
	seen := map[string]bool{}
	for i, f := range c.Fields {
		key := fmt.Sprintf("fields[%d]", i)
		if f.Name == "" {
			bad(key+".name", "required")
		} else if seen[f.Name] {
			bad(key+".name", "%q appears twice", f.Name)
		}
		seen[f.Name] = true
		switch f.Type {
		case TypeString, TypeLong, TypeDouble, TypeBoolean, TypeTimestamp:
		case "":
			bad(key+".type", "required (string, long, double, boolean, timestamp)")
		default:
			bad(key+".type", "%q: want string, long, double, boolean or timestamp", f.Type)
		}
	}
	if c.BatchSize < 1 {
		bad("batch_size", "must be positive")
	}
	if c.Linger < 0 && c.Linger != -1 {
		bad("linger", "%s: want a duration, or -1 for none", c.Linger)
	}
	if c.MaxInFlightBytes < -1 {
		bad("max_in_flight_bytes", "must be >= 0, or -1 for no byte bound; got %d", c.MaxInFlightBytes)
	}
	if c.MaxInFlightBytesTotal < -1 {
		bad("max_in_flight_bytes_total", "must be >= 0, or -1 for no stage-wide byte bound; got %d", c.MaxInFlightBytesTotal)
	}
	if c.MaxInFlightRecords < 1 {
		bad("max_in_flight_records", "must be positive")
	}
	if c.MaxInFlightRequests < 1 {
		bad("max_in_flight_requests", "must be positive")
	}
	if c.Timeout < 0 {
		bad("timeout", "must be positive")
	}
	if c.Retries < -1 {
		bad("retries", "%d: want a count, or -1 for none", c.Retries)
	}
	if c.BackoffMin < 0 {
		bad("backoff_min", "must be positive")
	}
	if c.BackoffMax < c.BackoffMin {
		bad("backoff_max", "%s is below enrich.backoff_min %s", c.BackoffMax, c.BackoffMin)
	}
	if c.CacheSize < -1 {
		bad("cache_size", "%d: want a count, or -1 to disable the cache", c.CacheSize)
	}
	if c.CacheTTL < 0 {
		bad("cache_ttl", "must be positive")
	}
	if c.NegativeCacheTTL < 0 {
		bad("negative_cache_ttl", "must be positive")
	}
	if c.CacheFile != "" && c.CacheSize < 0 {
		bad("cache_file", "needs the cache, which enrich.cache_size -1 disables")
	}
	if c.AuthHeader != "" {
		if _, _, err := parseAuthHeader(c.AuthHeader); err != nil {
			bad("auth_header", "%v", err)
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.cert_file", "enrich.tls.cert_file and enrich.tls.key_file go together")
	}
	b := c.Breaker
	switch b.Policy {
	case PolicyPause, PolicyPassthrough, PolicyDLQ:
	default:
		bad("breaker.policy", "%q: want pause, passthrough or dlq", b.Policy)
	}
	if math.IsNaN(b.FailureRatio) || b.FailureRatio <= 0 || b.FailureRatio > 1 {
		bad("breaker.failure_ratio", "%v: want a share in (0, 1]", b.FailureRatio)
	}
	if b.OpenTimeout < 0 {
		bad("breaker.open_timeout", "must be positive")
	}
	if span := c.RequestSpan(); span == math.MaxInt64 {
		bad("timeout and enrich.retries", "%s and %d: (retries+1) × (timeout + backoff_max) is beyond the longest duration, %s",
			c.Timeout, max(c.Retries, 0), span)
	} else if b.Interval.D() <= span {
		bad("breaker.interval", "%s: must exceed the longest a request may take, (retries+1) × (timeout + backoff_max) = %s: "+
			"a request's outcome counts in the window it began in, so a service that hangs would never open the breaker",
			b.Interval, c.RequestSpan())
	}
	return errors.Join(errs...)
}

// parseAuthHeader splits "Name: value". Its errors never contain the value.
func parseAuthHeader(h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || value == "" {
		return "", "", errors.New(`want "Name: value", e.g. "Authorization: Bearer ${TOKEN}"`)
	}
	for _, r := range name {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			// Not echoed: a malformed line may hold the credential.
			return "", "", errors.New("the part before ':' is not a valid HTTP header name")
		}
	}
	if strings.ContainsAny(value, "\r\n") {
		return "", "", errors.New("header value contains a line break")
	}
	return name, value, nil
}

// String describes the configuration without the auth header's value, so
// that printing a Config with %v cannot leak a credential.
func (c Config) String() string {
	r := c.redacted()
	type plain Config // no String method: avoids recursion
	return fmt.Sprintf("%+v", plain(r))
}

// LogValue makes slog print the configuration without the auth header's
// value.
func (c Config) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

func (c Config) redacted() Config {
	if c.AuthHeader != "" {
		name, _, _ := strings.Cut(c.AuthHeader, ":")
		c.AuthHeader = strings.TrimSpace(name) + ": REDACTED"
	}
	c.URL = redactURL(c.URL)
	c.Fields = append([]Field(nil), c.Fields...)
	return c
}

// redactURL hides a password in the URL's user info and the values of its
// query (a lookup API's token is often one), keeping {key} as written.
func redactURL(s string) string {
	const placeholder = "floe-enrich-key-placeholder"
	return strings.ReplaceAll(redact.URL(strings.ReplaceAll(s, "{key}", placeholder)), placeholder, "{key}")
}
