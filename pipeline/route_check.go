package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/floe-dev/floe/lakehouse"
)

// Start-up refusals of CheckStart. Each is overridable (StartOverrides).
var (
	// ErrRoutingChanged: a topic's routing differs from the one its tables
	// were written under, and its routes are not at a common offset, so the
	// records between their watermarks would land in no table or in two.
	ErrRoutingChanged = errors.New("routing changed")
	// ErrGroupChanged: the table holds the offset map of another group for
	// the topic, and none of the configured group, so the job would resume
	// from Kafka or start_offset instead of the table's watermarks.
	ErrGroupChanged = errors.New("group changed")
)

// routingDoc is the recorded form of a topic's routing (the value of
// lakehouse.RoutingKeyPrefix+topic): the field and each field route's table
// and values, or for a route that takes the whole topic only its table.
type routingDoc struct {
	Field string `json:"field,omitempty"`
	// Exact: the in values are as written (see routingOf); a routing
	// recorded without it has them normalized.
	Exact  bool           `json:"exact,omitempty"`
	Routes []routingEntry `json:"routes"`
}

type routingEntry struct {
	Table   string   `json:"table"`
	In      []string `json:"in,omitempty"`
	Default bool     `json:"default,omitempty"`
}

func (d routingDoc) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}

// tables returns the tables the routing names.
func (d routingDoc) tables() []string {
	out := make([]string, len(d.Routes))
	for i, r := range d.Routes {
		out[i] = r.Table
	}
	return out
}

// wholeTopic is the routing of a route that takes every record of its topic.
func wholeTopic(table string) string {
	return routingDoc{Routes: []routingEntry{{Table: table}}}.String()
}

// routingOf returns the fingerprint of route i's routing: with where, every
// field route of its topic (tables sorted, values as written, sorted);
// without, its table alone. The values are kept as written because the
// filter matches a string field by its text: in ["1.0"] and in ["1"] take
// different records. (Fingerprints recorded before recorded them
// normalized, "1.0" as "1": see legacyRoutingOf.)
func (c Config) routingOf(i int) string {
	return c.fingerprint(i, true)
}

// legacyRoutingOf is routingOf as floe recorded it before it kept the
// values as written: numbers normalized. A table that recorded it is taken
// to be on the configuration's routing (the forms cannot be told apart) —
// unless a YAML number of the topic's routes is written otherwise than in
// decimal (01, 1.50): floe then matched string fields by that text, and
// now matches them by the decimal, so it is "" and the table's routing
// differs.
func (c Config) legacyRoutingOf(i int) string {
	for _, o := range c.Routes {
		if o.Topic == c.Routes[i].Topic && o.Where != nil && o.Where.rewritten {
			return ""
		}
	}
	return c.fingerprint(i, false)
}

// fingerprint is routingOf, or with exact false legacyRoutingOf.
func (c Config) fingerprint(i int, exact bool) string {
	r := c.Routes[i]
	if r.Where == nil {
		return wholeTopic(r.Table.Name)
	}
	d := routingDoc{Exact: exact}
	for _, o := range c.Routes {
		if o.Topic != r.Topic || o.Where == nil {
			continue
		}
		e := routingEntry{Table: o.Table.Name, Default: o.Where.Default}
		if !o.Where.Default {
			d.Field = o.Where.Field
			for _, v := range o.Where.In {
				if !exact {
					v = normalizeValue(v)[2:] // "1.0" as "1", without the type tag
				}
				e.In = append(e.In, v)
			}
			slices.Sort(e.In)
			e.In = slices.Compact(e.In)
		}
		d.Routes = append(d.Routes, e)
	}
	slices.SortFunc(d.Routes, func(a, b routingEntry) int { return strings.Compare(a.Table, b.Table) })
	return d.String()
}

// sameRouting returns rec, a routing recorded by a table, or this job's
// own fingerprint when rec is that fingerprint in the form floe recorded
// before it kept in values as written (legacyRoutingOf).
func (c Config) sameRouting(rec string) string {
	if c.legacyRouting != "" && rec == c.legacyRouting {
		return c.RoutingFingerprint()
	}
	return rec
}

// RoutingFingerprint describes which records of its topic the job takes, in
// relation to the other routes of the topic. Every commit records it
// (lakehouse.RoutingKeyPrefix), so that CheckStart sees a changed routing.
func (c Config) RoutingFingerprint() string {
	if c.routing != "" {
		return c.routing
	}
	return wholeTopic(c.Table.Name)
}

// StartTable is a job about to run, with its opened table.
type StartTable struct {
	Config Config
	Table  *lakehouse.Table
}

// StartOverrides turn CheckStart's refusals into warnings.
type StartOverrides struct {
	// RoutingChange applies a routing change although the routes are not
	// at a common offset (floe run --accept-routing-change).
	RoutingChange bool
	// GroupChange resumes a group although the table holds another
	// group's offsets of the topic (floe run --accept-group-change).
	GroupChange bool
}

// startState is what CheckStart read of one job's table.
type startState struct {
	job StartTable
	// recorded is the routing the table's newest commit recorded ("" for
	// a table without offsets of the topic: a new one), config the job's.
	recorded, config string
	wm               map[int32]int64
}

// CheckStart runs the checks of `floe run` before any member starts, over
// the jobs that will run and the field routes they split a topic with:
//
//   - ErrGroupChanged when a table holds another group's offsets of the
//     job's topic and none of the job's group (moving a single-table job
//     into routes changes its group; so does renaming kafka.group);
//   - ErrRoutingChanged when a table's recorded routing differs from the
//     configuration's and the routes involved (those configured and those
//     the recorded routing names) are not at a common offset: each route
//     still on the old routing must be at the same watermark per
//     partition, and each already on the new one at or past it.
//
// A route the recorded routing does not name, whose table is new (a field
// route added to the topic), joins at that common offset: its table's
// watermarks are set there before it runs (join), so that it takes its
// records from where the routing changes, not from start_offset. When ov
// accepts a change from uncommon offsets, it joins where joinAccepted says.
// With start_offset latest, the field routes of a topic that have no
// offsets of it yet start where its routes started, or all at one offset
// when none has (startLatest).
//
// Each refusal is a warning instead when ov accepts it.
func CheckStart(ctx context.Context, jobs []StartTable, ov StartOverrides, log *slog.Logger) error {
	states := make([]*startState, len(jobs))
	var errs []error
	for i, j := range jobs {
		tbl, err := j.Table.Load(ctx)
		if err != nil {
			return err
		}
		groups, err := lakehouse.OffsetMapsOf(tbl)
		if err != nil {
			return fmt.Errorf("table %s: %w", j.Config.Table.Name, err)
		}
		topic, group := j.Config.Kafka.Topic, j.Config.Kafka.Group
		st := &startState{job: j, config: j.Config.RoutingFingerprint(), wm: groups[group][topic]}
		if rec, ok := lakehouse.RoutingOf(tbl, topic); ok {
			st.recorded = j.Config.sameRouting(rec)
		} else if len(st.wm) > 0 {
			st.recorded = wholeTopic(j.Config.Table.Name) // written before routing was recorded
		}
		states[i] = st
		if len(st.wm) > 0 {
			continue // the member checks its own watermarks against the log
		}
		if err := tableBeyondLog(ctx, j.Config.Kafka, groups); err != nil {
			errs = append(errs, fmt.Errorf("table %s: %w", j.Config.Table.Name, err))
			continue
		}
		for _, other := range slices.Sorted(maps.Keys(groups)) {
			if other == group || len(groups[other][topic]) == 0 {
				continue
			}
			err := fmt.Errorf("%w: table %s holds offsets of topic %s under group %s and none under group %s: "+
				"set %s to continue from them (else this group resumes from its Kafka offsets or start_offset, "+
				"skipping or re-reading records)", ErrGroupChanged, j.Config.Table.Name, topic, other, group, groupKey(j.Config, other))
			if !ov.GroupChange {
				errs = append(errs, err)
			} else {
				log.Warn("starting a new group on a table written by another (--accept-group-change)", "err", err)
			}
			break
		}
	}
	reported := map[string]bool{}
	joins := map[*startState]map[int32]int64{}
	for _, st := range states {
		if st.recorded == "" || st.recorded == st.config {
			continue
		}
		joining, from, err := checkRoutingChange(st, states)
		if err == nil {
			if len(from) == 0 {
				continue // the others have no offsets either: all start alike (with start_offset latest, as startLatest sets)
			}
			for _, j := range joining {
				joins[j] = from
			}
			continue
		}
		if ov.RoutingChange {
			for _, j := range joining {
				if _, ok := joins[j]; !ok {
					if from := joinAccepted(j, st, states, log); len(from) > 0 {
						joins[j] = from
					}
				}
			}
		}
		if reported[err.Error()] {
			continue
		}
		reported[err.Error()] = true
		if !ov.RoutingChange {
			errs = append(errs, err)
		} else {
			log.Warn("applying a routing change from uncommon offsets (--accept-routing-change)", "err", err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Where each table's routing changes, for a replay not to re-route the
	// records below with the new one (checkReplayRouting).
	for _, st := range states {
		if st.recorded != "" && st.recorded != st.config && len(st.wm) > 0 {
			st.job.Table.SetRoutingSince(st.job.Config.Kafka.Topic, st.wm)
		}
	}
	for st, from := range joins {
		if err := join(ctx, st, from, log); err != nil {
			return err
		}
	}
	return startLatest(ctx, states, joins, log)
}

// join makes a route new to its topic's routing start at the offsets from,
// where the routing changes: an empty commit sets its table's watermarks
// there (recording its routing), so that it takes what its where selects
// from that offset on, not from start_offset — below it the other routes'
// tables hold those records, under the old routing.
func join(ctx context.Context, st *startState, from map[int32]int64, log *slog.Logger) error {
	topic, name := st.job.Config.Kafka.Topic, st.job.Config.Table.Name
	st.job.Table.SetRoutingSince(topic, from)
	if err := startAt(ctx, st, from); err != nil {
		return fmt.Errorf("table %s, a new route of topic %s: starting it at %s: %w", name, topic, formatWatermarks(from), err)
	}
	log.Info("a new route joins its topic's routing where the other routes are", "table", name, "topic", topic, "offsets", formatWatermarks(from))
	return nil
}

// startAt sets the watermarks of st's table, which has none of its topic,
// at the offsets from: an empty commit (recording its routing and, as
// floe.first.<group>, from as where its coverage starts), fenced like a
// first flush, so that it fails with lakehouse.ErrFenced when another
// process set them meanwhile.
func startAt(ctx context.Context, st *startState, from map[int32]int64) error {
	topic := st.job.Config.Kafka.Topic
	parts := make([]lakehouse.Part, 0, len(from))
	for p, w := range from {
		parts = append(parts, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: p, From: w, To: w}, Resume: lakehouse.NoWatermark})
	}
	st.job.Table.SetRouting(topic, st.config)
	_, err := st.job.Table.Commit(ctx, parts)
	return err
}

// startLatestAttempts bounds how often startLatest reads a topic's routes
// again after another process started some of them meanwhile.
const startLatestAttempts = 5

// startLatest makes the field routes of a topic with start_offset latest
// start each partition at one offset. Each route runs as its own group
// and resolved "latest" for itself when its member first started: a route
// that started later than another (floe run --table, or a slower join)
// started past it, and its records in between were in no table (verify
// counts gaps from the least of the routes' first offsets). A route whose
// table has no offsets of the topic under its group (not one that joined
// under a routing change, placed above) therefore starts where the
// topic's routes started: per partition, the least of their first offsets
// (floe.first.<group>) and, for a partition a route has no watermark of,
// of its group's Kafka offset (the pin of a route that started but has not
// committed it yet, its own included). When no route has started, the
// topic's last stable offsets are read once, and every route starts
// there. The tables are set in table order (startAt), so that two
// processes starting routes of one topic at once agree: the one fenced
// reads the routes again.
func startLatest(ctx context.Context, states []*startState, joins map[*startState]map[int32]int64, log *slog.Logger) error {
	topics := map[string][]*startState{}
	for _, st := range states {
		if c := st.job.Config; c.FieldRouted() && c.Kafka.StartOffset == "latest" {
			topics[c.Kafka.Topic] = append(topics[c.Kafka.Topic], st)
		}
	}
	for _, topic := range slices.Sorted(maps.Keys(topics)) {
		routes := topics[topic]
		if len(routes) < 2 || !slices.ContainsFunc(routes, func(st *startState) bool {
			_, joined := joins[st]
			return len(st.wm) == 0 && !joined
		}) {
			continue // a default route alone, or every route has started
		}
		slices.SortFunc(routes, func(a, b *startState) int { return strings.Compare(a.job.Config.Table.Name, b.job.Config.Table.Name) })
		for attempt := 1; ; attempt++ {
			err := startRoutesLatest(ctx, topic, routes, log)
			if !errors.Is(err, lakehouse.ErrFenced) || attempt == startLatestAttempts {
				if err != nil {
					return fmt.Errorf("topic %s, start_offset latest: starting its routes at one offset: %w", topic, err)
				}
				break
			}
			log.Info("another floe started routes of the topic meanwhile; reading their offsets again", "topic", topic, "err", err)
		}
	}
	return nil
}

// startRoutesLatest is one attempt of startLatest over one topic's field
// routes, sorted by table.
func startRoutesLatest(ctx context.Context, topic string, routes []*startState, log *slog.Logger) error {
	k := routes[0].job.Config.Kafka
	stable, err := EndOffsets(ctx, k)
	if err != nil {
		return fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	partitions := make([]int, 0, len(stable))
	for p := range stable {
		partitions = append(partitions, int(p))
	}
	slices.Sort(partitions)
	from := map[int32]int64{}
	least := func(p int32, o int64) {
		if f, ok := from[p]; !ok || o < f {
			from[p] = o
		}
	}
	var fresh []*startState
	for _, st := range routes {
		name, group := st.job.Config.Table.Name, st.job.Config.Kafka.Group
		tbl, err := st.job.Table.Load(ctx)
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		wm, err := lakehouse.WatermarksOf(tbl, group)
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		first, err := lakehouse.FirstOffsetsOf(tbl, group)
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		own := wm[topic]
		if len(own) == 0 {
			fresh = append(fresh, st)
		}
		for p, w := range own {
			f, ok := first.Get(topic, p)
			if !ok {
				// Written before floe recorded where coverage starts.
				log.Warn("a route's first offset of a partition is not recorded: the routes that start now start it at its "+
					"watermark, and miss their records below it since the route started", "table", name, "topic", topic,
					"partition", p, "watermark", w)
				f = w
			}
			least(p, f)
		}
		pins, err := GroupOffsets(ctx, st.job.Config.Kafka, partitions)
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		for p, o := range pins {
			if _, ok := own[p]; !ok {
				least(p, o)
			}
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	resolved := len(from) == 0
	if resolved {
		from = stable // no route has started: "latest", once for all
	}
	for _, st := range fresh {
		if err := startAt(ctx, st, from); err != nil {
			return fmt.Errorf("table %s: starting it at %s: %w", st.job.Config.Table.Name, formatWatermarks(from), err)
		}
		if resolved {
			log.Info("start_offset latest: the routes of the topic start where it ends now", "table", st.job.Config.Table.Name,
				"topic", topic, "offsets", formatWatermarks(from))
		} else {
			log.Info("start_offset latest: a route starts where the topic's other routes started", "table", st.job.Config.Table.Name,
				"topic", topic, "offsets", formatWatermarks(from))
		}
	}
	return nil
}

// checkReplayRouting refuses to replay ranges the configuration's routing
// did not route: a replay keeps the records the configured where takes, so
// under another routing it would insert records another route's table holds
// (the same offset in two tables, which no MERGE dedupes). The table's
// recorded routing must be the configuration's, and each range start at or
// after the offset from which it applies (lakehouse.RoutingSinceOf).
func checkReplayRouting(ctx context.Context, cfg Config, tbl *lakehouse.Table, ranges []ReplayRange) error {
	t, err := tbl.Load(ctx)
	if err != nil {
		return err
	}
	topic, name := cfg.Kafka.Topic, cfg.Table.Name
	rec, ok := lakehouse.RoutingOf(t, topic)
	rec = cfg.sameRouting(rec)
	if !ok {
		return nil // written before routing was recorded, or not yet: one routing as far as is known
	}
	if config := cfg.RoutingFingerprint(); rec != config {
		return fmt.Errorf("replay: table %s was written under routing %s, the configuration routes %s: a replay would keep "+
			"other records than the table's; replay with the configuration it runs under", name, rec, config)
	}
	since, err := lakehouse.RoutingSinceOf(t, topic)
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	for _, r := range ranges {
		if s, ok := since[r.Partition]; ok && r.From < s {
			return fmt.Errorf("replay: the routing of table %s applies from offset %d of %s/%d (below it the topic was routed "+
				"otherwise, and a replay under this routing would put records in two tables): want from >= %d, got %d",
				name, s, topic, r.Partition, s, r.From)
		}
	}
	return nil
}

// groupKey names the setting that selects group for cfg.
func groupKey(cfg Config, group string) string {
	if cfg.route > 0 {
		return fmt.Sprintf("routes[%d].group: %s", cfg.route-1, group)
	}
	return fmt.Sprintf("kafka.group: %s (or --group %s)", group, group)
}

// checkRoutingChange decides whether the change of st's routing applies
// from a common offset of every route involved (nil) or not. A route the
// recorded routing does not name, whose table has no offsets of the topic,
// is new: it joins at that offset (from) rather than being compared; it is
// returned with the error too, to join where joinAccepted says.
func checkRoutingChange(st *startState, states []*startState) (joining []*startState, from map[int32]int64, err error) {
	topic := st.job.Config.Kafka.Topic
	var oldDoc, newDoc routingDoc
	if err := json.Unmarshal([]byte(st.recorded), &oldDoc); err != nil {
		return nil, nil, fmt.Errorf("table %s: decoding %s%s: %w", st.job.Config.Table.Name, lakehouse.RoutingKeyPrefix, topic, err)
	}
	_ = json.Unmarshal([]byte(st.config), &newDoc) // made by routingOf
	names := slices.Compact(slices.Sorted(slices.Values(append(oldDoc.tables(), newDoc.tables()...))))
	fail := func(why string) error {
		return fmt.Errorf("%w: topic %s: table %s was written under routing %s, the configuration routes %s; %s. "+
			"A changed routing must apply from the same offset in every route, else records between their watermarks "+
			"land in no table or in two. Stop the producers and run the old configuration with --until-caught-up "+
			"(every route then reaches the same offsets), or pass --accept-routing-change to apply it anyway",
			ErrRoutingChanged, topic, st.job.Config.Table.Name, st.recorded, st.config, why)
	}
	var involved []*startState
	var missing string
	for _, name := range names {
		i := slices.IndexFunc(states, func(s *startState) bool {
			return s.job.Config.Table.Name == name && s.job.Config.Kafka.Topic == topic
		})
		if i < 0 {
			missing = cmp.Or(missing, name)
			continue
		}
		if s := states[i]; s.recorded == "" && len(s.wm) == 0 && !slices.Contains(oldDoc.tables(), name) {
			joining = append(joining, s)
			continue
		}
		involved = append(involved, states[i])
	}
	if missing != "" {
		return joining, nil, fail(fmt.Sprintf("table %s is not a configured route of the topic, so its offsets cannot be compared", missing))
	}
	// The routes still on their old routing (or new) must share one
	// watermark per partition; the ones already on the new routing (a
	// change applied before a restart) must be at or past it.
	var common map[int32]int64
	var commonTable string
	for _, s := range involved {
		if s.recorded == s.config {
			continue
		}
		if common == nil {
			common, commonTable = s.wm, s.job.Config.Table.Name
			if common == nil {
				common = map[int32]int64{}
			}
			continue
		}
		if !maps.Equal(common, s.wm) {
			return joining, nil, fail(fmt.Sprintf("the routes are not at a common offset (%s at %s, %s at %s)",
				commonTable, formatWatermarks(common), s.job.Config.Table.Name, formatWatermarks(s.wm)))
		}
	}
	for _, s := range involved {
		if s.recorded != s.config {
			continue
		}
		for p, w := range s.wm {
			if c, ok := common[p]; !ok || w < c {
				return joining, nil, fail(fmt.Sprintf("table %s, already on the new routing, is at %s, behind %s at %s",
					s.job.Config.Table.Name, formatWatermarks(s.wm), commonTable, formatWatermarks(common)))
			}
		}
		for p := range common {
			if _, ok := s.wm[p]; !ok {
				return joining, nil, fail(fmt.Sprintf("table %s, already on the new routing, has no watermark of partition %d", s.job.Config.Table.Name, p))
			}
		}
	}
	return joining, common, nil
}

// joinAccepted is where route n, new to its topic's routing, starts when
// the change was accepted from uncommon offsets (there is no common offset
// to join at): per partition, at the least watermark of the routes that took
// its values before (the old default route, or the routes its in values
// move from), which hold those records below their watermarks. The least
// loses nothing; records of its values between that and the greatest of
// those watermarks land in two tables, and the warning says where. When no
// configured route took its values (their route was removed), every
// configured route of the topic counts. A partition one of them has no
// watermark of starts as that route starts it, from start_offset.
//
// Each route's values are read from the routing its table recorded, or for
// a route that has not committed yet, from old (the routing st recorded).
func joinAccepted(n, st *startState, states []*startState, log *slog.Logger) map[int32]int64 {
	topic, name := n.job.Config.Kafka.Topic, n.job.Config.Table.Name
	var old, newDoc routingDoc
	_ = json.Unmarshal([]byte(st.recorded), &old) // decoded by checkRoutingChange
	_ = json.Unmarshal([]byte(n.config), &newDoc) // made by routingOf
	var took, all []*startState
	for _, s := range states {
		if s.job.Config.Kafka.Topic != topic || s.recorded == "" && !slices.Contains(old.tables(), s.job.Config.Table.Name) {
			continue // another topic's, or new like n
		}
		all = append(all, s)
		d := old
		if s.recorded != "" {
			var own routingDoc
			if json.Unmarshal([]byte(s.recorded), &own) == nil {
				d = own
			}
		}
		if tookAny(d, s.job.Config.Table.Name, newDoc, name) {
			took = append(took, s)
		}
	}
	if len(took) == 0 {
		took = all
	}
	from, greatest := map[int32]int64{}, map[int32]int64{}
	for _, s := range took {
		for p, w := range s.wm {
			if f, ok := from[p]; !ok || w < f {
				from[p] = w
			}
			greatest[p] = max(greatest[p], w)
		}
	}
	var sources []string
	for _, s := range took {
		sources = append(sources, s.job.Config.Table.Name+" at "+formatWatermarks(s.wm))
		for p := range from {
			if _, ok := s.wm[p]; !ok {
				delete(from, p) // that route starts p from start_offset
			}
		}
	}
	var risk []string
	for _, p := range slices.Sorted(maps.Keys(from)) {
		if greatest[p] > from[p] {
			risk = append(risk, fmt.Sprintf("%d:%d-%d", p, from[p], greatest[p]))
		}
	}
	if len(risk) > 0 {
		log.Warn("a new route joins at the least watermark of the routes that took its values (--accept-routing-change): "+
			"its records in the ranges at risk may be in two tables", "table", name, "topic", topic,
			"routes", strings.Join(sources, ", "), "offsets", formatWatermarks(from), "at_risk", "{"+strings.Join(risk, " ")+"}")
	}
	return from
}

// tookAny reports whether the route of table, under routing d, took any
// record that the route of newTable takes under routing newDoc. Routings
// of different fields cannot be compared value by value: any route may have.
func tookAny(d routingDoc, table string, newDoc routingDoc, newTable string) bool {
	i := slices.IndexFunc(d.Routes, func(e routingEntry) bool { return e.Table == table })
	j := slices.IndexFunc(newDoc.Routes, func(e routingEntry) bool { return e.Table == newTable })
	if i < 0 || j < 0 {
		return false
	}
	if d.Field != newDoc.Field {
		return true // also a route that took the whole topic, or a default one alone
	}
	was, now := d.Routes[i], newDoc.Routes[j]
	switch {
	case was.Default && now.Default:
		return true
	case was.Default: // it took the values no other route had
		return slices.ContainsFunc(now.In, func(v string) bool { return !inAny(d, v) })
	case now.Default:
		return slices.ContainsFunc(was.In, func(v string) bool { return !inAny(newDoc, v) })
	default:
		return slices.ContainsFunc(now.In, func(v string) bool { return slices.Contains(was.In, v) })
	}
}

// inAny reports whether a field route of d takes value v.
func inAny(d routingDoc, v string) bool {
	return slices.ContainsFunc(d.Routes, func(e routingEntry) bool { return slices.Contains(e.In, v) })
}

// formatWatermarks prints a partition → offset map in partition order.
func formatWatermarks(wm map[int32]int64) string {
	if len(wm) == 0 {
		return "no watermarks"
	}
	parts := make([]string, 0, len(wm))
	for _, p := range slices.Sorted(maps.Keys(wm)) {
		parts = append(parts, fmt.Sprintf("%d:%d", p, wm[p]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
