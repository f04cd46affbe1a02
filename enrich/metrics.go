package enrich

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the stage's Prometheus series. Gauges move by Add/Sub rather
// than Set (except the breaker state), so two stages sharing a registry
// (a member restarted in the same process) add up instead of overwriting.
type metrics struct {
	inFlightRecords  prometheus.Gauge
	inFlightBytes    prometheus.Gauge
	inFlightRequests prometheus.Gauge
	batchSize        prometheus.Histogram
	requestDuration  prometheus.Histogram
	cacheHits        prometheus.Counter
	cacheMisses      prometheus.Counter
	coalesced        prometheus.Counter
	refreshes        prometheus.Counter
	breakerState     prometheus.Gauge
	transitions      *prometheus.CounterVec
	retries          prometheus.Counter
	splits           prometheus.Counter
	hedges           prometheus.Counter
	results          [5]prometheus.Counter // by statusIndex
	attributeErrors  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var errs []error
	// register returns the collector already registered under the same
	// description, if any, so that several stages can share a registry.
	register := func(c prometheus.Collector) prometheus.Collector {
		if reg == nil {
			return c
		}
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector
			}
			errs = append(errs, err)
		}
		return c
	}
	m := &metrics{
		inFlightRecords: register(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_enrich_in_flight_records",
			Help: "Records submitted to the enrichment stage and not yet handed on, over all lanes; other routes' records passing a lane in order count too, as they hold its room.",
		})).(prometheus.Gauge),
		inFlightBytes: register(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_enrich_in_flight_bytes",
			Help: "Bytes of the records in floe_enrich_in_flight_records (key, value and per-record overhead), bounded by max_in_flight_bytes_total.",
		})).(prometheus.Gauge),
		inFlightRequests: register(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_enrich_in_flight_requests",
			Help: "Lookup requests holding a request slot, and the halves of split batches (including those waiting for the breaker or a retry).",
		})).(prometheus.Gauge),
		batchSize: register(prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floe_enrich_batch_size",
			Help:    "Distinct keys per lookup request.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		})).(prometheus.Histogram),
		requestDuration: register(prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floe_enrich_request_duration_seconds",
			Help:    "Duration of one HTTP attempt against the enrichment service, whatever its outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		})).(prometheus.Histogram),
		cacheHits: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_cache_hits_total",
			Help: "Submitted keys answered from the cache (results and remembered misses).",
		})).(prometheus.Counter),
		cacheMisses: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_cache_misses_total",
			Help: "Submitted keys not in the cache (they join a lookup in flight or start one).",
		})).(prometheus.Counter),
		coalesced: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_coalesced_total",
			Help: "Cache misses that joined a lookup of the same key already in flight.",
		})).(prometheus.Counter),
		refreshes: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_refreshes_total",
			Help: "Background lookups of cached keys near the end of their TTL.",
		})).(prometheus.Counter),
		breakerState: register(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_enrich_breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
		})).(prometheus.Gauge),
		transitions: register(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_enrich_breaker_transitions_total",
			Help: "Circuit breaker state changes, by the state entered.",
		}, []string{"to"})).(*prometheus.CounterVec),
		retries: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_retries_total",
			Help: "HTTP attempts repeated after a retryable failure.",
		})).(prometheus.Counter),
		splits: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_batch_splits_total",
			Help: "Failing batches split in halves under the pause policy (other requests succeeding meanwhile, or three failed requests, with the breaker closed; or a failed half-open probe answered 400, 413, 422 or 500), so that a key the service cannot answer holds only its own records.",
		})).(prometheus.Counter),
		hedges: register(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_enrich_hedged_requests_total",
			Help: "Requests sent a second time because the first was slower than enrich.hedge_after.",
		})).(prometheus.Counter),
		attributeErrors: register(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_enrich_attribute_errors_total",
			Help: "Attribute values the service returned that could not be converted to the field's type (stored as null).",
		}, []string{"field"})).(*prometheus.CounterVec),
	}
	results := register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floe_enrich_results_total",
		Help: "Records leaving the enrichment stage, by status (records passed without a lookup, such as another route's, are not counted).",
	}, []string{"status"})).(*prometheus.CounterVec)
	for _, st := range []Status{StatusOK, StatusMiss, StatusSkipped, StatusDead, StatusError} {
		m.results[statusIndex(st)] = results.WithLabelValues(string(st))
	}
	for _, to := range []string{"closed", "half-open", "open"} {
		m.transitions.WithLabelValues(to) // export zeros
	}
	return m, errors.Join(errs...)
}

// statusIndex is the index of st's counter in metrics.results. A switch
// rather than a map: it runs once per record.
func statusIndex(st Status) int {
	switch st {
	case StatusOK:
		return 0
	case StatusMiss:
		return 1
	case StatusSkipped:
		return 2
	case StatusDead:
		return 3
	default:
		return 4
	}
}
