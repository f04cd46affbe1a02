package schemas

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/floe-dev/floe/internal/redact"
)

// Message formats, the values of the `format:` configuration key.
const (
	FormatJSON     = "json"
	FormatAvro     = "avro"
	FormatProtobuf = "protobuf"
)

// ReasonUnknownSchema: a Confluent wire-format message names a schema id
// the registry does not have (or an Avro schema one of whose references it
// does not have), or whose schema floe cannot use (another format, a
// schema that does not parse, a Protobuf schema with references).
const ReasonUnknownSchema = "unknown_schema"

// ReasonIncompatibleSchema: the writer's schema (from the registry) has a
// field whose type the table's column cannot hold, or lacks a required
// one. With RegistryConfig.OnIncompatible "stop" (the default) such a
// message is not dead-lettered: Append returns an *IncompatibleSchemaError
// and the partition stops there.
const ReasonIncompatibleSchema = "incompatible_schema"

// IncompatibleSchemaError stops a partition at a message whose writer
// schema does not fit the table, so that no row is written with a wrong
// type and nothing after it is committed until the table or the producer
// is fixed.
type IncompatibleSchemaError struct {
	SchemaID int
	Field    string
	Detail   string
}

func (e *IncompatibleSchemaError) Error() string {
	return "schema id " + strconv.Itoa(e.SchemaID) + " is incompatible with the table: field " + strconv.Quote(e.Field) + ": " + e.Detail
}

// Format says how message values are encoded. Without a registry, JSON
// values are objects and Avro values are Avro binary written with the
// schema file's own schema. With a registry, values are in the Confluent
// wire format (magic byte 0, a 4-byte big-endian schema id, for Protobuf
// the message indexes, then the value), written with the registry's schema
// of that id, which is fetched once and cached; its fields are matched to
// the schema file's columns by name.
type Format struct {
	// Kind is FormatJSON (default), FormatAvro or FormatProtobuf.
	Kind string
	// Registry is the Confluent-API schema registry; nil means plain
	// values.
	Registry *RegistryConfig
	// Proto names the message type of plain Protobuf values (format
	// protobuf without a registry).
	Proto *ProtoConfig
}

// ProtoConfig names the message type of plain (unframed) Protobuf values:
// a .proto file (its imports resolve relative to its directory, and the
// well-known types are built in) and the fully qualified message name.
type ProtoConfig struct {
	File    string `yaml:"file"`
	Message string `yaml:"message"`
}

// RegistryConfig says how to reach a schema registry.
type RegistryConfig struct {
	// URL is the registry's base URL (http or https).
	URL string `yaml:"url"`
	// BasicAuth is "user:password"; BearerToken a token. At most one.
	BasicAuth   string `yaml:"basic_auth"`
	BearerToken string `yaml:"bearer_token"`
	// TLS files: a CA bundle to trust, and a client certificate and key.
	TLS struct {
		CAFile   string `yaml:"ca_file"`
		CertFile string `yaml:"cert_file"`
		KeyFile  string `yaml:"key_file"`
	} `yaml:"tls"`
	// OnIncompatible is what a message whose writer schema does not fit the
	// table does: "stop" (default) stops the partition with an
	// *IncompatibleSchemaError naming the field; "dlq" dead-letters it as
	// incompatible_schema.
	OnIncompatible string `yaml:"on_incompatible"`
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration `yaml:"-"`
}

// WithFormat returns a copy of s whose RecordBuilders decode f. The
// built-in schema keeps its fast JSON Builder for plain JSON.
func (s *Schema) WithFormat(f Format) (*Schema, error) {
	if s.user == nil {
		return nil, fmt.Errorf("schema %s: formats other than its own JSON need a schema file", s.Name)
	}
	out := *s
	switch f.Kind {
	case "", FormatJSON:
		if f.Registry != nil {
			return nil, errors.New("format json: JSON values do not use a schema registry; remove registry")
		}
		out.kind, out.reg = FormatJSON, nil
		return &out, nil
	case FormatAvro, FormatProtobuf:
	default:
		return nil, fmt.Errorf("format %q: want %s, %s or %s", f.Kind, FormatJSON, FormatAvro, FormatProtobuf)
	}
	if f.Proto != nil && (f.Kind != FormatProtobuf || f.Registry != nil) {
		return nil, errors.New("proto: names the message type of plain Protobuf values; it goes with format protobuf and no registry")
	}
	if f.Registry == nil {
		out.kind, out.reg = f.Kind, nil
		if f.Kind == FormatProtobuf {
			md, err := loadProtoMessage(f.Proto, s.user.record)
			if err != nil {
				return nil, err
			}
			out.proto = md
		}
		return &out, nil
	}
	reg, err := newRegistry(*f.Registry)
	if err != nil {
		return nil, err
	}
	out.kind, out.reg = f.Kind, reg
	return &out, nil
}

// newDecoder returns a value decoder for one builder of s: JSON unless
// WithFormat chose another format.
func (s *Schema) newDecoder() valueDecoder {
	record := s.user.record
	switch {
	case s.reg != nil:
		if s.user.table != nil {
			record = s.user.table // the writer schemas' contract, not the file's
		}
		return &wireDecoder{reg: s.reg, kind: s.kind, record: record, extra: s.Extra, evolve: s.evolve}
	case s.kind == FormatAvro:
		return &avroDecoder{writer: s.user.avro, record: record}
	case s.kind == FormatProtobuf:
		return &protoDecoder{md: s.proto, maps: newProtoMaps(s.proto), record: record}
	}
	return &jsonDecoder{record: record}
}

// registry fetches writer schemas by id and keeps them, parsed, for the
// life of the process (a schema id's schema never changes). It is shared
// by every Builder of a Schema.
type registry struct {
	cl *sr.Client
	// secrets are the credentials sent, scrubbed from errors (fail).
	secrets redact.Secrets
	timeout time.Duration
	stop    bool // OnIncompatible is "stop"

	mu   sync.Mutex
	byID map[int]*writerSchema
	// unknown counts the ids of byID the registry did not have (see
	// maxUnknownIDs).
	unknown int
}

// maxUnknownIDs bounds the ids the registry did not have that are kept
// until they are asked again: values that only look framed (garbage, a
// foreign producer) carry ids without end, and each stayed for the life of
// the process. Past it, expired ones go, and then new ones are not kept.
const maxUnknownIDs = 4096

// writerSchema is a registry schema ready to decode with, or the reason
// it cannot be used.
type writerSchema struct {
	avro  avro.Schema
	proto protoreflect.FileDescriptor
	err   *DecodeError
	// retryAt, for an id the registry did not have, is when to ask again:
	// a producer may register a schema after the registry first answered,
	// or a replica lag behind.
	retryAt time.Time
}

// unknownRetry is how long a registry's "no such schema id" answer is
// trusted (its messages meanwhile are dead-lettered as unknown_schema). A
// variable for tests.
var unknownRetry = 10 * time.Second

func newRegistry(c RegistryConfig) (*registry, error) {
	if c.URL == "" {
		return nil, errors.New("registry.url: required")
	}
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return nil, fmt.Errorf("registry.url %q: want an http:// or https:// URL", redact.URL(c.URL))
	}
	switch c.OnIncompatible {
	case "", "stop", "dlq":
	default:
		return nil, fmt.Errorf("registry.on_incompatible %q: want stop or dlq", c.OnIncompatible)
	}
	// sr sets Authorization on every request, and net/http keeps it on a
	// redirect to the same host name (another port or scheme: another
	// service) or a subdomain, so a redirect is not followed.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}
	opts := []sr.ClientOpt{sr.URLs(c.URL), sr.UserAgent("floe"), sr.HTTPClient(hc)}
	// A registry (or a proxy) may echo the Authorization it got into an
	// error's body, which sr makes the error's message.
	var secrets redact.Secrets
	if u, err := url.Parse(c.URL); err == nil && u.User != nil {
		pass, _ := u.User.Password() // net/http sends it as Basic
		secrets = redact.Basic(u.User.Username(), pass)
	}
	switch {
	case c.BasicAuth != "" && c.BearerToken != "":
		return nil, errors.New("registry: set basic_auth or bearer_token, not both")
	case c.BasicAuth != "":
		user, pass, ok := strings.Cut(c.BasicAuth, ":")
		if !ok {
			return nil, errors.New("registry.basic_auth: want user:password")
		}
		opts = append(opts, sr.BasicAuth(user, pass))
		secrets = append(secrets, redact.Basic(user, pass)...)
	case c.BearerToken != "":
		opts = append(opts, sr.BearerToken(c.BearerToken))
		secrets = append(secrets, c.BearerToken)
	}
	if c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.KeyFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("registry.tls.ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("registry.tls.ca_file %s: no PEM certificate in it", c.TLS.CAFile)
			}
		}
		if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
			return nil, errors.New("registry.tls: cert_file and key_file go together")
		}
		if c.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("registry.tls: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &registry{cl: cl, secrets: secrets, timeout: timeout, stop: c.OnIncompatible != "dlq", byID: map[int]*writerSchema{}}, nil
}

// WarnInsecure logs, once at start-up, registry credentials (basic_auth,
// bearer_token or the url's user info) that would cross the network in
// clear text.
func (c *RegistryConfig) WarnInsecure(log *slog.Logger) {
	u, err := url.Parse(c.URL)
	if err == nil && u.Scheme == "http" && (c.BasicAuth != "" || c.BearerToken != "" || u.User != nil) {
		log.Warn("registry credentials (basic_auth, bearer_token or the url's user info) are sent over plain http; use https:// outside a trusted network")
	}
}

// errRedirect refuses a redirect; net/http's error names its target.
var errRedirect = errors.New("redirect not followed: it would send the registry's credentials there; set registry.url to where it points")

// answerShown is how much of a registry's answer an error shows.
const answerShown = 256

// fail is err, from the registry client, fit for a log: sr makes the
// registry's answer (its JSON message, or its whole body) the error's
// message, and it may echo the Authorization sent; a transport error
// names the URL (a refused redirect's target) with its query.
func (r *registry) fail(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return r.secrets.Error(redact.RequestError(ue), 0)
	}
	return r.secrets.Error(err, answerShown)
}

// Confluent's error codes of a 404 for what the registry does not have.
const (
	errSubjectNotFound = 40401
	errVersionNotFound = 40402
	errSchemaNotFound  = 40403
)

// notFound classifies err, from the registry client: true when it is the
// registry's answer that it does not have what was asked, a 404 with
// error_code 40401, 40402 or 40403; otherwise the error to report, fit for
// a log (see fail). A 404 without such a code did not come from a schema
// registry — a proxy or an ingress without a route to it (during a
// redeploy), a wrong path prefix in registry.url — and says nothing of the
// schema: read as "no such schema", it made every good record an
// unknown_schema dead letter. Like a 5xx, it stops the partition, which
// retries.
func (r *registry) notFound(err error) (bool, error) {
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		return false, r.fail(err)
	}
	switch re.ErrorCode {
	case errSubjectNotFound, errVersionNotFound, errSchemaNotFound:
		return true, nil
	}
	// The answer, often an HTML page, on one line of the log.
	said := strings.Join(strings.Fields(r.fail(err).Error()), " ")
	return false, fmt.Errorf("%s %s answered 404 without a schema registry's error code (40401-40403): the answer did not come from a schema registry (a proxy or ingress without a route to it, or a wrong path in registry.url); it said: %s",
		re.Method, redact.URL(re.URL), said)
}

// get returns schema id's writer schema. An error that is not a
// *DecodeError (the registry unreachable, a 5xx) is not cached and is not
// the message's fault; an unknown id is asked again after unknownRetry.
func (r *registry) get(id int, kind string) (*writerSchema, error) {
	r.mu.Lock()
	ws, ok := r.byID[id]
	r.mu.Unlock()
	if ok && (ws.retryAt.IsZero() || time.Now().Before(ws.retryAt)) {
		return ws, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		if missing, err := r.notFound(err); !missing {
			return nil, fmt.Errorf("fetching schema id %d from the registry: %w", id, err)
		}
		ws = &writerSchema{err: &DecodeError{Reason: ReasonUnknownSchema, Detail: "the registry has no schema id " + strconv.Itoa(id)},
			retryAt: time.Now().Add(unknownRetry)}
	} else if ws, err = r.parseWriterSchema(ctx, id, s, kind); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byID[id]; ok && !old.retryAt.IsZero() {
		r.unknown--
	}
	if !ws.retryAt.IsZero() {
		if r.unknown >= maxUnknownIDs {
			now := time.Now()
			for i, w := range r.byID {
				if !w.retryAt.IsZero() && now.After(w.retryAt) {
					delete(r.byID, i)
					r.unknown--
				}
			}
		}
		if r.unknown >= maxUnknownIDs {
			delete(r.byID, id)
			return ws, nil
		}
		r.unknown++
	}
	r.byID[id] = ws
	return ws, nil
}

// parseWriterSchema parses schema id's schema s, after the schemas it
// references (Avro). An error is the registry's, as in get.
func (r *registry) parseWriterSchema(ctx context.Context, id int, s sr.Schema, kind string) (*writerSchema, error) {
	typ := s.Type
	if typ == 0 {
		typ = sr.TypeAvro
	}
	switch {
	case kind == FormatAvro && typ == sr.TypeAvro:
		cache := &avro.SchemaCache{}
		if ws, err := r.avroReferences(ctx, id, s.References, cache, map[sr.SchemaReference]bool{}); ws != nil || err != nil {
			return ws, err
		}
		as, err := avro.ParseBytesWithCache([]byte(s.Schema), "", cache)
		if err != nil {
			return badSchema(id, "not a valid Avro schema: "+err.Error()), nil
		}
		return &writerSchema{avro: as}, nil
	case kind == FormatProtobuf && typ == sr.TypeProtobuf:
		if len(s.References) > 0 {
			return badSchema(id, "Protobuf schemas with references are not supported"), nil
		}
		fd, err := compileProto(id, s.Schema)
		if err != nil {
			return badSchema(id, err.Error()), nil
		}
		return &writerSchema{proto: fd}, nil
	}
	return badSchema(id, "is a "+typ.String()+" schema; the format is "+kind), nil
}

// maxReferences bounds the schemas one writer schema references, directly
// or through others.
const maxReferences = 100

// avroReferences parses the Avro schemas refs names (fetched by subject
// and version, each after its own references) into cache, where the
// schema referring to them finds their named types, as Confluent's
// deserializers do. seen holds the references fetched already. It returns
// the writer schema of id that cannot be used, if a reference cannot, or
// the registry's error.
func (r *registry) avroReferences(ctx context.Context, id int, refs []sr.SchemaReference, cache *avro.SchemaCache, seen map[sr.SchemaReference]bool) (*writerSchema, error) {
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		if len(seen) > maxReferences {
			return badSchema(id, "references more than "+strconv.Itoa(maxReferences)+" schemas"), nil
		}
		what := "reference " + ref.Name + " (subject " + ref.Subject + " version " + strconv.Itoa(ref.Version) + ")"
		ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			if missing, err := r.notFound(err); !missing {
				return nil, fmt.Errorf("fetching schema id %d's %s from the registry: %w", id, what, err)
			}
			ws := badSchema(id, what+": the registry does not have it")
			ws.retryAt = time.Now().Add(unknownRetry)
			return ws, nil
		}
		if ss.Type != 0 && ss.Type != sr.TypeAvro {
			return badSchema(id, what+": is a "+ss.Type.String()+" schema"), nil
		}
		if ws, err := r.avroReferences(ctx, id, ss.References, cache, seen); ws != nil || err != nil {
			return ws, err
		}
		if _, err := avro.ParseBytesWithCache([]byte(ss.Schema.Schema), "", cache); err != nil {
			return badSchema(id, what+": not a valid Avro schema: "+err.Error()), nil
		}
	}
	return nil, nil
}

// badSchema is schema id that floe cannot use, for the reason detail.
func badSchema(id int, detail string) *writerSchema {
	return &writerSchema{err: &DecodeError{Reason: ReasonUnknownSchema, Detail: Truncate("schema id "+strconv.Itoa(id)+": "+detail, maxDetailBytes)}}
}

// wireDecoder reads the Confluent wire format.
type wireDecoder struct {
	reg    *registry
	kind   string
	record *node
	// extra are the enrichment columns, which no writer field can become.
	extra []Column
	// evolve makes a writer schema that needs the table to change return
	// an *EvolveRequest (see Schema.Evolving); plans caches, per Avro
	// writer schema or Protobuf message type, what it needs.
	evolve bool
	plans  map[any]writerPlan
	// maps caches newProtoMaps per Protobuf message type.
	maps map[protoreflect.MessageDescriptor]protoMaps
}

func (d *wireDecoder) decode(value []byte, cols []array.Builder) (int, error) {
	if len(value) < 5 || value[0] != 0 {
		return 0, &DecodeError{Reason: ReasonMalformedValue, Detail: "not in the Confluent wire format (magic byte 0 and a 4-byte schema id)"}
	}
	id := int(binary.BigEndian.Uint32(value[1:5]))
	if id > math.MaxInt32 {
		// Not asked: Confluent's ids are Java ints, and its registry
		// answers a path it cannot convert with a 404 without a schema
		// error code, which reads as no registry at that URL.
		return 0, &DecodeError{Reason: ReasonUnknownSchema, Detail: "schema id " + strconv.Itoa(id) + " is above the largest a Confluent schema registry assigns (2147483647, a 32-bit signed integer)"}
	}
	ws, err := d.reg.get(id, d.kind)
	if err != nil {
		return 0, err
	}
	if ws.err != nil {
		de := *ws.err // each dead letter gets its own copy
		return 0, &de
	}
	rest := value[5:]
	var derr *DecodeError
	var grown int
	if ws.avro != nil {
		if err := d.request(id, ws.avro, func() writerPlan { return avroPlan(ws.avro, d.record, d.extra) }); err != nil {
			return 0, err
		}
		r := avroReader{buf: rest}
		if derr = r.record(ws.avro, d.record, nil, cols, 0); derr == nil && r.pos != len(r.buf) {
			derr = malformed(strconv.Itoa(len(r.buf)-r.pos) + " bytes follow the Avro value")
		}
		grown = r.grown
	} else {
		var md protoreflect.MessageDescriptor
		if md, rest, derr = protoMessageDescriptor(ws.proto, rest); derr == nil {
			if err := d.request(id, md, func() writerPlan { return protoPlan(md, d.record, d.extra) }); err != nil {
				return 0, err
			}
			maps, ok := d.maps[md]
			if !ok {
				if d.maps == nil {
					d.maps = map[protoreflect.MessageDescriptor]protoMaps{}
				}
				maps = newProtoMaps(md)
				d.maps[md] = maps
			}
			grown, derr = decodeProto(md, maps, rest, d.record, cols)
		}
	}
	if derr == nil {
		return grown, nil
	}
	if derr.Reason == ReasonIncompatibleSchema && d.reg.stop {
		return 0, &IncompatibleSchemaError{SchemaID: id, Field: derr.Field, Detail: derr.Detail}
	}
	return 0, derr
}
