package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/schemas"
)

// RouteConfig is one pipeline of a multi-table job (the routes: section): a
// topic, the table it writes and that table's schema. Every route runs as an
// independent member inside the same process, with its own consumer group,
// so each table keeps its own offset map (floe.offsets.<group>) and the
// commit protocol applies per route unchanged. Keys left out are inherited
// from the top level of the file (kafka.*, table.catalog, format, registry,
// enrich, commit, maintain).
type RouteConfig struct {
	// Topic is the Kafka topic the route reads. Required.
	Topic string `yaml:"topic"`
	// Group is the route's consumer group. Default "<kafka.group>.<table.name>".
	Group string `yaml:"group"`
	// DLQTopic receives the route's dead letters. Default "<topic>.dlq".
	DLQTopic string `yaml:"dlq_topic"`
	// Where, when set, makes the route take only the records whose field
	// value it names; absent, the route takes every record of the topic.
	Where *WhereConfig `yaml:"where"`
	// Table names the route's table; its catalog and target_file_bytes
	// default to the top-level table section's.
	Table TableConfig `yaml:"table"`
	// Schema is the route's schema (built-in name or file). Default: the
	// top-level schema.
	Schema string `yaml:"schema"`
	// Format, Registry, Proto, Dedupe and Enrich default to the top level's.
	Format   string                  `yaml:"format"`
	Registry *schemas.RegistryConfig `yaml:"registry"`
	Proto    *schemas.ProtoConfig    `yaml:"proto"`
	Dedupe   *DedupeConfig           `yaml:"dedupe"`
	Enrich   *enrich.Config          `yaml:"enrich"`
}

// WhereConfig routes records of one topic to several tables by the value of
// a field of the (JSON) record value: a route with Field and In takes the
// records whose field is one of In; the topic's one Default route takes every
// other record, including those whose field is missing, not a string or
// number, or whose value is not JSON at all (its decoder then dead-letters
// them). The records a route does not take are covered offsets of its
// segments, counted as filtered: neither rows nor dead letters.
type WhereConfig struct {
	// Field is the field's name; "a.b" names field b of object a.
	Field string `yaml:"field"`
	// In lists the values taken: strings, or numbers (compared as numbers).
	In []string `yaml:"in"`
	// Default takes what the topic's other routes do not.
	Default bool `yaml:"default"`
	// rewritten: a YAML number of In was written otherwise than in the
	// decimal it is kept as (01, 1.50, 0x1F), so it matches string fields
	// by another text than floe did before it rewrote them: see
	// legacyRoutingOf.
	rewritten bool
}

// UnmarshalYAML refuses a value of in that is neither a string nor a
// number (YAML would read `in: [true]` as the string "true", which no
// JSON true matches, and the route would silently take nothing), and keys
// other than field, in and default (a decoder of a type with its own
// UnmarshalYAML does not check them).
func (w *WhereConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			switch k := n.Content[i]; k.Value {
			case "field", "in", "default":
			default:
				return fmt.Errorf("line %d: field %s not found in where (field, in, default)", k.Line, k.Value)
			}
		}
	}
	var raw struct {
		Field   string      `yaml:"field"`
		In      []yaml.Node `yaml:"in"`
		Default bool        `yaml:"default"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*w = WhereConfig{Field: raw.Field, Default: raw.Default}
	for _, v := range raw.In {
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: where.in: want strings or numbers, got a list or map", v.Line)
		}
		value := v.Value
		switch v.ShortTag() {
		case "!!str":
		case "!!int", "!!float":
			// YAML numbers such as 0x1F, 0o17, 0b101 and 1_000 are kept in
			// decimal, as JSON writes them (the filter and the overlap check
			// read the text with strconv.ParseFloat).
			var err error
			if value, err = yamlNumber(&v); err != nil {
				return fmt.Errorf("line %d: where.in: %s: %w", v.Line, v.Value, err)
			}
			w.rewritten = w.rewritten || value != v.Value
		default:
			return fmt.Errorf("line %d: where.in: %s is a %s, not a string or number: quote it to match the string", v.Line, v.Value, strings.TrimPrefix(v.ShortTag(), "!!"))
		}
		w.In = append(w.In, value)
	}
	return nil
}

// leadingZero matches an integer written with leading zeros.
var leadingZero = regexp.MustCompile(`^[-+]?0[0-9]+$`)

// yamlNumber returns the decimal text of an !!int or !!float node.
func yamlNumber(v *yaml.Node) (string, error) {
	if leadingZero.MatchString(v.Value) {
		// Decimal, as YAML 1.2 reads it (and floe did): yaml.v3 would
		// read 010 as the YAML 1.1 octal 8.
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10), nil
	}
	if v.ShortTag() == "!!int" {
		var n any // int, int64 or uint64
		if err := v.Decode(&n); err != nil {
			return "", err
		}
		return fmt.Sprint(n), nil
	}
	var f float64
	if err := v.Decode(&f); err != nil {
		return "", err
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "", errors.New("no JSON number is infinite or NaN")
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// Routed reports whether the job has a routes: section.
func (c Config) Routed() bool { return len(c.Routes) > 0 }

// FieldRouted reports whether this (expanded, single-table) config takes
// only some of its topic's records (a route with where).
func (c Config) FieldRouted() bool { return c.where != nil }

// Jobs returns the pipelines of a Finish()ed config: the config itself when
// it has no routes, else one complete single-table Config per route, in the
// order of the file, each with its defaults applied.
func (c Config) Jobs() []Config {
	if !c.Routed() {
		return []Config{c}
	}
	out := make([]Config, len(c.Routes))
	for i := range c.Routes {
		out[i] = c.expand(i)
	}
	return out
}

// expand returns route i as a single-table Config with defaults applied.
func (c Config) expand(i int) Config {
	r := c.Routes[i]
	rc := c
	rc.Routes = nil
	rc.Kafka.Topic = r.Topic
	rc.Kafka.Group = r.Group
	if rc.Kafka.Group == "" {
		rc.Kafka.Group = c.Kafka.Group + "." + r.Table.Name
	}
	rc.Kafka.DLQTopic = r.DLQTopic
	if rc.Kafka.DLQTopic == "" {
		rc.Kafka.DLQTopic = c.Kafka.DLQTopic // "" unless set at the top: then <topic>.dlq
	}
	rc.Table.Name = r.Table.Name
	if r.Table.Catalog != nil {
		rc.Table.Catalog = r.Table.Catalog
	}
	if r.Table.TargetFileBytes != 0 {
		rc.Table.TargetFileBytes = r.Table.TargetFileBytes
	}
	if r.Schema != "" {
		rc.Schema = r.Schema
	}
	if r.Format != "" {
		rc.Format = r.Format
		if rc.Format == schemas.FormatJSON {
			// The top level's registry and proto are for its avro/protobuf.
			rc.Registry, rc.Proto = nil, nil
		}
	}
	if r.Registry != nil {
		rc.Registry = r.Registry
	}
	if r.Proto != nil {
		rc.Proto = r.Proto
	}
	if r.Dedupe != nil {
		rc.Dedupe = r.Dedupe
	}
	if r.Enrich != nil {
		rc.Enrich = r.Enrich
	}
	if r.Where != nil {
		field, values := c.siblingValues(i)
		rc.where = newRouteFilter(*r.Where, field, values)
	}
	rc.routing = c.routingOf(i)
	rc.legacyRouting = c.legacyRoutingOf(i)
	rc.route = i + 1
	rc.defaults()
	return rc
}

// siblingValues returns the field and In values of the other field routes
// of route i's topic: what its default route must leave to them.
func (c Config) siblingValues(i int) (field string, values []string) {
	for j, r := range c.Routes {
		if j != i && r.Topic == c.Routes[i].Topic && r.Where != nil && !r.Where.Default {
			field = r.Where.Field
			values = append(values, r.Where.In...)
		}
	}
	return field, values
}

// validateRoutes checks the routes: section; each error names the route.
func (c *Config) validateRoutes() error {
	var errs []error
	if c.Kafka.Topic != "" {
		errs = append(errs, errors.New("kafka.topic: not allowed with routes (each route names its topic; use one form or the other)"))
	}
	if c.Table.Name != "" {
		errs = append(errs, errors.New("table.name: not allowed with routes (each route names its table; use one form or the other)"))
	}
	if c.Kafka.Group == "" {
		errs = append(errs, errors.New("kafka.group: required (routes' groups default to <kafka.group>.<table name>)"))
	}
	tables := map[string]int{}
	groups := map[string]int{}
	type topicRoutes struct {
		all, field, defaults []int
	}
	topics := map[string]*topicRoutes{}
	var order []string
	for i, r := range c.Routes {
		name := routeName(i, r)
		bad := func(key, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s: %s", name, key, fmt.Sprintf(format, args...)))
		}
		if r.Topic == "" {
			bad("topic", "required")
		}
		if r.Table.Name == "" {
			bad("table.name", "required (namespace.table)")
		} else if j, dup := tables[r.Table.Name]; dup {
			bad("table.name", "%s is also the table of %s: each table belongs to one route", r.Table.Name, routeName(j, c.Routes[j]))
		} else {
			tables[r.Table.Name] = i
		}
		if w := r.Where; w != nil {
			switch {
			case w.Default && (w.Field != "" || len(w.In) > 0):
				bad("where", "default: true takes what the other routes do not; it has no field or in")
			case !w.Default && w.Field == "":
				bad("where.field", "required (or default: true)")
			case !w.Default && slices.ContainsFunc(strings.Split(w.Field, "."), func(p string) bool { return p == "" || strings.TrimSpace(p) != p }):
				bad("where.field", "%q: each dotted part must be a field name, not empty or padded with spaces", w.Field)
			case !w.Default && len(w.In) == 0:
				bad("where.in", "required: the values of %s this route takes", w.Field)
			}
			for _, v := range w.In {
				if v == "" {
					bad("where.in", "an empty value matches nothing")
				}
			}
		}
		if r.Topic == "" {
			continue
		}
		tr := topics[r.Topic]
		if tr == nil {
			tr = &topicRoutes{}
			topics[r.Topic] = tr
			order = append(order, r.Topic)
		}
		tr.all = append(tr.all, i)
		switch {
		case r.Where == nil:
		case r.Where.Default:
			tr.defaults = append(tr.defaults, i)
		default:
			tr.field = append(tr.field, i)
		}
	}
	for _, topic := range order {
		tr := topics[topic]
		if len(tr.field)+len(tr.defaults) == 0 {
			continue
		}
		for _, i := range tr.all {
			if c.Routes[i].Where == nil {
				errs = append(errs, fmt.Errorf("%s: where: required, since other routes of topic %s route by field (without it this route would take their records too)",
					routeName(i, c.Routes[i]), topic))
			}
		}
		switch len(tr.defaults) {
		case 1:
		case 0:
			errs = append(errs, fmt.Errorf("routes of topic %s: no route has where: {default: true}; records matching none of the field routes would be dropped", topic))
		default:
			names := make([]string, len(tr.defaults))
			for k, i := range tr.defaults {
				names[k] = routeName(i, c.Routes[i])
			}
			errs = append(errs, fmt.Errorf("routes of topic %s: %d default routes (%s); exactly one takes the records no field route takes",
				topic, len(tr.defaults), strings.Join(names, ", ")))
		}
		fields := map[string]bool{}
		for _, i := range tr.field {
			fields[c.Routes[i].Where.Field] = true
		}
		if len(fields) > 1 {
			errs = append(errs, fmt.Errorf("routes of topic %s: route by one field, not %d (%s)", topic, len(fields), strings.Join(slices.Sorted(maps.Keys(fields)), ", ")))
		}
		taken := map[string]int{} // normalized value → route
		for _, i := range tr.field {
			for _, v := range c.Routes[i].Where.In {
				key := normalizeValue(v)
				if j, dup := taken[key]; dup && j != i {
					errs = append(errs, fmt.Errorf("%s: where.in: %q is also taken by %s: a record goes to exactly one table",
						routeName(i, c.Routes[i]), v, routeName(j, c.Routes[j])))
				}
				taken[key] = i
			}
		}
	}
	// Each route as the single-table config it runs as. A problem every
	// route has comes from the top level and is reported once.
	perRoute := map[int][]error{}
	count := map[string]int{}
	checked := 0
	for i, r := range c.Routes {
		if r.Topic == "" || r.Table.Name == "" {
			continue
		}
		checked++
		rc := c.expand(i)
		if err := rc.validate(); err != nil {
			for _, e := range unjoin(err) {
				perRoute[i] = append(perRoute[i], e)
				count[e.Error()]++
			}
		}
	}
	reported := map[string]bool{}
	for i, r := range c.Routes {
		for _, e := range perRoute[i] {
			switch {
			case count[e.Error()] < checked || checked == 1:
				errs = append(errs, fmt.Errorf("%s: %w", routeName(i, r), e))
			case !reported[e.Error()]:
				reported[e.Error()] = true
				errs = append(errs, e)
			}
		}
	}
	cacheFiles := map[string]int{}
	for i, r := range c.Routes {
		if r.Topic == "" || r.Table.Name == "" {
			continue
		}
		rc := c.expand(i)
		j, dup := groups[rc.Kafka.Group]
		switch {
		case !dup:
			groups[rc.Kafka.Group] = i
		case tables[r.Table.Name] == i: // else the repeated table is reported
			errs = append(errs, fmt.Errorf("%s: group: %s is also the group of %s: each table keeps its own offset map under its own group",
				routeName(i, r), rc.Kafka.Group, routeName(j, c.Routes[j])))
		}
		if r.Where != nil && rc.Format != schemas.FormatJSON {
			errs = append(errs, fmt.Errorf("%s: where: routing by field reads JSON values; format %s is not supported", routeName(i, r), rc.Format))
		}
		if rc.Enrich != nil && r.Enrich != nil {
			if err := rc.Enrich.Finish(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", routeName(i, r), err))
			}
		}
		if rc.Enrich != nil && rc.Enrich.CacheFile != "" {
			file := cacheFileID(rc.Enrich.CacheFile)
			if j, dup := cacheFiles[file]; dup {
				errs = append(errs, fmt.Errorf("%s: enrich.cache_file: %s is also the cache file of %s: each route saves its own cache, so the last to stop would overwrite the others'; give each route an enrich section with a file of its own",
					routeName(i, r), rc.Enrich.CacheFile, routeName(j, c.Routes[j])))
			} else {
				cacheFiles[file] = i
			}
		}
	}
	return errors.Join(errs...)
}

// cacheFileID is what every spelling of the cache file path names shares
// (a/../b, ./b, b, or through a link to its directory): its absolute
// directory with the links resolved, when it exists, and its base name.
// The base name is not resolved: a save replaces a link there with a
// file of its own.
func cacheFileID(path string) string {
	file, err := filepath.Abs(path)
	if err != nil {
		file = filepath.Clean(path)
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(file)); err == nil {
		file = filepath.Join(dir, filepath.Base(file))
	}
	return file
}

// unjoin returns the errors errors.Join combined (err itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// routeName names route i in errors: routes[i] and its table when it has one.
func routeName(i int, r RouteConfig) string {
	if r.Table.Name == "" {
		return fmt.Sprintf("routes[%d]", i)
	}
	return fmt.Sprintf("routes[%d] (table %s)", i, r.Table.Name)
}

// normalizeValue makes "1" and "1.0" the same value: where compares numbers
// as numbers.
func normalizeValue(v string) string {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f == 0 {
			f = 0 // -0 is 0, as the filter compares them
		}
		return "n:" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	return "s:" + v
}
