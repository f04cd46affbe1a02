// Package enrich is floe's asynchronous, batched enrichment stage: records
// are looked up in an HTTP service by a key (e.g. user_id) and leave the
// stage, per partition, in the order they entered, however out of order the
// lookups complete. It also holds the reference enrichment server that the
// demo, the tests and the benchmarks run.
//
// # Why
//
// The case studies (DESIGN.md) wait 600 ms (p99 2.8 s) per record on a
// synchronous lookup. Here a record never waits on the network unless its
// key is unknown to the cache, and then it waits together with thousands of
// others: Little's law at 45,000 records/s needs ~27,000 lookups in flight,
// which is 54 requests of 500 keys.
//
// # The lookup contract
//
// Batch mode (default): POST <url> with
//
//	{"keys":["u-1","u-2"]}
//
// answered 200 with
//
//	{"results":{"u-1":{"segment":"gold","score":0.7}}}
//
// A key absent from "results" (or mapped to null) is a miss, not an error.
// A repeated member (a key in "results", an attribute in its object) counts
// by its last value, as in records.
//
// Single mode, for services without a batch endpoint: GET <url> with {key}
// replaced by the key, percent-encoded (everything but A-Z a-z 0-9 - . _ ~),
// answered 200 with the attribute object, or 404 for a miss.
//
// Attribute values are converted to the configured Field types: string
// (UTF-8 only, as in records), long, double, boolean, and timestamp (an RFC
// 3339 string or epoch milliseconds). A value that does not convert becomes
// null and is counted in floe_enrich_attribute_errors_total.
//
// Failures: transport errors, timeouts (Config.Timeout per attempt), 429 and
// 5xx other than 501 are retried (Config.Retries, full-jitter exponential
// backoff between Config.BackoffMin and BackoffMax). Everything else — other
// statuses, an undecodable body (over 64 MiB, or over 65,536 JSON values and
// 1,024 a key asked), a TLS verification failure — is a permanent
// failure of that request. A request that still fails after its retries
// counts as one failure for the circuit breaker (unless it asked for an
// isolated key, see pause below).
//
// # Ordering, coalescing, batching, bounds
//
//   - A Queue (lane) per partition: Submit order is Take order. A cached key
//     completes at once but still leaves behind earlier records of its lane;
//     so does an item passed without a lookup (Pass: another route's record).
//     Take hands over every completed record at the head at once, a batch per
//     wake-up; a lane has no goroutine of its own (Out, a channel over Take,
//     starts one).
//   - The fast path: while a lane is idle (every record submitted to it
//     taken and Delivered), Direct answers a cached key at once and the
//     caller hands its record on itself: a warm cache's records cost a cache
//     read, not a trip through the lane. AwaitIdle lets the caller wait for
//     an idle lane instead of queueing behind records that wait for nothing
//     but their consumer. Cached is Direct without the wait, for a caller
//     that reads the key while it hands the record on.
//   - A key already being looked up is not looked up again: every record
//     waiting for it gets the one result (coalescing).
//   - New keys from all lanes are gathered into requests of up to BatchSize
//     keys, sent when full or Linger after the first key arrived, at most
//     MaxInFlightRequests at once. While all request slots are busy, the
//     next batch keeps filling.
//   - A lane holds at most MaxInFlightRecords records and MaxInFlightBytes
//     bytes (as sized by SubmitSized) between Submit and Take (plus 257 in
//     Out when it is used); then Submit blocks. While no record in it waits
//     for a lookup, a lane holds at most 1024: it then waits only for its
//     consumer, and holding more would cost memory and GC time without
//     hiding latency. Beyond 1024 records a lane also needs room in
//     MaxInFlightBytesTotal, shared by all lanes: during a cold start the
//     lanes behind slow lookups run far ahead (their keys looked up
//     meanwhile) while the stage's memory stays bounded however many
//     partitions it serves. A lane's first 1024 records may also use a
//     reserve of the same size, so lanes behind cold keys cannot starve
//     the others, and the lanes together hold at most twice the bound
//     (plus one record and 64 KiB each). That is the backpressure that
//     stops the partition's fetching: the pipeline's group heartbeats run
//     elsewhere, so a slow service can never cause a rebalance.
//   - Results are cached for CacheTTL, misses for NegativeCacheTTL, in a
//     cache bounded by CacheSize that evicts keys not read for a while (two
//     generations per shard, an approximate LRU whose hit is a single map
//     read). A key read after 80% of its TTL is refreshed in
//     the background, so hot keys never expire into a lane-stalling lookup.
//
// # Circuit breaker and policies
//
// A sony/gobreaker breaker guards the service. It opens when, within the
// rolling Breaker.Interval, at least Breaker.MinRequests requests have
// finished and Breaker.FailureRatio of them failed; after
// Breaker.OpenTimeout it lets one probe through (half-open), and closes
// when the probe succeeds. While it is open, and when a request fails for
// good, Breaker.Policy decides:
//
//   - pause (default): nothing is failed. Lookups wait, and are retried when
//     the breaker turns half-open (or, while it is closed, after a backoff,
//     or the wait a 429 or 503 asked for with Retry-After);
//     lanes fill, Submit blocks, the pipeline stops fetching and commits
//     nothing past the last enriched record. When the service answers again
//     everything resumes by itself; nothing is lost or duplicated. A
//     permanent error (say a 401 after a token rotation) also pauses: it is
//     logged once per breaker transition. A batch that fails for its own
//     keys (others succeed meanwhile, or it failed three times, or as the
//     half-open probe with a 400, 413, 422 or 500) is split in halves until
//     a key the service cannot answer is alone: only its records, and those
//     behind them in their partitions, wait (floe_enrich_batch_splits_total).
//     Once such a key alone has failed while other requests succeeded, it
//     is isolated: its failures with one of those statuses no longer count
//     for the breaker, and while other lookups wait for the half-open
//     breaker's probe it leaves the probe to them. Retried for as long as
//     it fails, it would open the breaker for every partition whenever few
//     other requests are made (a warm cache). A record waiting for such a
//     key that its lane's Doomed says cannot be used anyway leaves at
//     once, as StatusDead.
//   - passthrough: records complete without enrichment: StatusSkipped while
//     the breaker is open, StatusError (with Err) after a failed request.
//   - dlq: records complete with StatusDead and Err (ErrBreakerOpen or a
//     *RequestError), for the dead-letter topic.
//
// A 429 or 503 whose Retry-After asks for longer than BackoffMax ends its
// request at once, under every policy, rather than being waited out between
// attempts: the request would outlast Breaker.Interval, and gobreaker counts
// an outcome only in the window its request began in, so a service in
// maintenance answering that way would never open the breaker. The batch
// waits between requests instead, and asks again (under passthrough and
// dlq while Retries remain).
//
// A key the service does not know is StatusMiss under every policy.
//
// # Lifecycle
//
// NewStage, then Run(ctx) in its own goroutine; NewQueue per partition.
// Close a Queue to drain it; Abort it on revocation to drop what it holds at
// once. When Run's ctx ends, Run waits for its requests to stop, and every
// Queue's Take reports ErrStopped without its pending records (the caller
// redoes them from Kafka, which the table's watermark fence makes safe).
//
// # Secrets
//
// Config.AuthHeader's value is sent on every request and appears nowhere
// else: not in errors (a server echoing it, whole or its credential alone,
// is scrubbed before the error's 256-byte snippet of the body is cut), not
// in logs, not in Config's String or LogValue. So are the credentials of
// Config.URL (its user info's, its query's values), wherever the service
// echoes them. Redirects are not followed: a 3xx is a permanent error
// naming its Location (redacted like the URL), since following it would
// send the header to wherever the server points (over plain http, too).
//
// # Metrics
//
// floe_enrich_in_flight_records, floe_enrich_in_flight_requests,
// floe_enrich_batch_size, floe_enrich_request_duration_seconds,
// floe_enrich_cache_hits_total, floe_enrich_cache_misses_total,
// floe_enrich_coalesced_total, floe_enrich_refreshes_total,
// floe_enrich_breaker_state (0 closed, 1 half-open, 2 open),
// floe_enrich_breaker_transitions_total{to}, floe_enrich_retries_total,
// floe_enrich_hedged_requests_total, floe_enrich_results_total{status},
// floe_enrich_attribute_errors_total{field}.
//
// # Hedged requests
//
// Under ordered completion a lane waits for the slowest lookup among its
// records, so on a cold cache the service's tail latency sets how long
// lanes stall. An attempt not answered within Config.HedgeAfter (by default
// twice the median of recent latencies) is sent once more while the breaker
// is closed; the first success wins and the other request is cancelled.
package enrich
