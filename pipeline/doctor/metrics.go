package doctor

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names floe exports that the diagnosis reads.
const (
	MetricLagRecords      = "floe_consumer_lag_records"
	MetricLagSeconds      = "floe_consumer_lag_seconds"
	MetricRebalances      = "floe_rebalances_total"
	MetricGenerations     = "floe_generations_total" // older name of the same count
	MetricDuplicates      = "floe_duplicates_skipped_total"
	MetricEnrichLatency   = "floe_enrich_request_duration_seconds"
	MetricEnrichInFlight  = "floe_enrich_in_flight_records"
	MetricConsumed        = "floe_records_consumed_total"
	MetricAssigned        = "floe_assigned_partitions"
	MetricProcessStart    = "process_start_time_seconds"
	MetricCacheHits       = "floe_enrich_cache_hits_total"
	MetricCacheMisses     = "floe_enrich_cache_misses_total"
	MetricPartitionsAdded = "floe_partitions_added_total"
	metricTopicLabel      = "topic"
	metricPartitionLabel  = "partition"
	metricTableLabel      = "table"
)

// Metrics is one scrape of a floe process's /metrics, reduced to what the
// diagnosis uses. Values sums every series of a name (counters and gauges);
// the lag maps hold the configured topic's series by partition.
type Metrics struct {
	At         time.Time
	Values     map[string]float64
	LagRecords map[int32]float64
	LagSeconds map[int32]float64
	// Latency is floe_enrich_request_duration_seconds, summed over series;
	// nil when the process has no enrichment stage.
	Latency *Histogram
}

// Has says whether the scrape had a series named name.
func (m *Metrics) Has(name string) bool {
	_, ok := m.Values[name]
	return ok
}

// Histogram is a cumulative Prometheus histogram.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets []Bucket // ascending upper bounds, cumulative counts
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Mean is Sum/Count, 0 without observations.
func (h *Histogram) Mean() float64 {
	if h == nil || h.Count == 0 {
		return 0
	}
	return h.Sum / h.Count
}

// Since returns the observations made after earlier (both cumulative), so
// quantiles describe the sample window rather than the process's lifetime.
func (h *Histogram) Since(earlier *Histogram) *Histogram {
	if h == nil || earlier == nil || len(h.Buckets) != len(earlier.Buckets) || h.Count < earlier.Count {
		return h
	}
	d := &Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum}
	for i, b := range h.Buckets {
		d.Buckets = append(d.Buckets, Bucket{b.UpperBound, b.Count - earlier.Buckets[i].Count})
	}
	return d
}

// Quantile estimates the q-quantile by linear interpolation inside the
// bucket that holds it, as Prometheus' histogram_quantile does; the highest
// finite bound when it falls in the +Inf bucket; 0 without observations.
func (h *Histogram) Quantile(q float64) float64 {
	if h == nil || h.Count == 0 || len(h.Buckets) == 0 {
		return 0
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank {
			if math.IsInf(b.UpperBound, 1) {
				return lower
			}
			if b.Count == below {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.UpperBound, b.Count
	}
	return lower
}

// ParseMetrics reads the Prometheus text exposition format and keeps the
// series floe's diagnosis needs; lag series are kept for topic only. A job
// with routes labels each route's series with its table: only table's are
// kept (and those without the label: a job without routes, or the
// process's own).
func ParseMetrics(r io.Reader, topic, table string, at time.Time) (*Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	m := &Metrics{At: at, Values: map[string]float64{}, LagRecords: map[int32]float64{}, LagSeconds: map[int32]float64{}}
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			if !ofTable(s, table) {
				continue
			}
			switch {
			case s.Histogram != nil:
				if name == MetricEnrichLatency {
					m.Latency = addHistogram(m.Latency, s.Histogram)
				}
				continue
			case s.Counter != nil:
				m.Values[name] += s.Counter.GetValue()
			case s.Gauge != nil:
				m.Values[name] += s.Gauge.GetValue()
			case s.Untyped != nil:
				m.Values[name] += s.Untyped.GetValue()
			default:
				continue
			}
			if name != MetricLagRecords && name != MetricLagSeconds {
				continue
			}
			var t string
			part := int32(-1)
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case metricTopicLabel:
					t = l.GetValue()
				case metricPartitionLabel:
					if v, err := strconv.ParseInt(l.GetValue(), 10, 32); err == nil {
						part = int32(v)
					}
				}
			}
			if t != topic || part < 0 {
				continue
			}
			v := valueOf(s)
			if name == MetricLagRecords {
				m.LagRecords[part] = v
			} else {
				m.LagSeconds[part] = v
			}
		}
	}
	return m, nil
}

// ofTable reports whether series s is table's or carries no table label.
func ofTable(s *dto.Metric, table string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == metricTableLabel {
			return l.GetValue() == table
		}
	}
	return true
}

func valueOf(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	default:
		return s.Untyped.GetValue()
	}
}

// addHistogram adds one series to acc; series with different bucket layouts
// keep the first layout's buckets and add only count and sum.
func addHistogram(acc *Histogram, h *dto.Histogram) *Histogram {
	var bs []Bucket
	for _, b := range h.GetBucket() {
		bs = append(bs, Bucket{b.GetUpperBound(), float64(b.GetCumulativeCount())})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].UpperBound < bs[j].UpperBound })
	if n := len(bs); n == 0 || !math.IsInf(bs[n-1].UpperBound, 1) {
		bs = append(bs, Bucket{math.Inf(1), float64(h.GetSampleCount())})
	}
	if acc == nil {
		return &Histogram{Count: float64(h.GetSampleCount()), Sum: h.GetSampleSum(), Buckets: bs}
	}
	acc.Count += float64(h.GetSampleCount())
	acc.Sum += h.GetSampleSum()
	if len(acc.Buckets) == len(bs) {
		for i := range bs {
			acc.Buckets[i].Count += bs[i].Count
		}
	}
	return acc
}
