package enrich

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fastjson"
)

// NoLatency as ServerConfig.P50 makes the reference server answer at once.
const NoLatency time.Duration = -1

// Outage is a window, measured from the server's start, during which every
// request is answered 503.
type Outage struct {
	Start, End time.Duration
}

// ServerConfig shapes the reference enrichment server.
type ServerConfig struct {
	// P50 and P99 of the lognormal latency added to each request (one sample
	// per request). Zero means the case study's 600ms and 2.8s; NoLatency
	// as P50 answers at once. P99 below P50 means a fixed latency of P50.
	P50, P99 time.Duration
	// ErrorRate is the share of requests answered 503 (at once).
	ErrorRate float64
	// MissRate is the share of keys the server does not know, chosen by a
	// hash of the key so the same keys are always unknown.
	MissRate float64
	// Outages are windows during which every request is answered 503.
	Outages []Outage
	// FailKeys are keys the server cannot answer: a request that asks for
	// one of them is answered 500 (after its latency), whatever else it
	// asks for (a key that trips a bug in the service).
	FailKeys []string
	// Seed seeds the latency and error draws.
	Seed int64
	// RequireHeader, "Name: value", makes requests without exactly that
	// header fail with 401.
	RequireHeader string
}

// Server is the reference enrichment service: the lookup contract of this
// package (POST /lookup, GET /lookup/{key}), with a configurable latency
// distribution, error rate, miss rate and outages. floe demo, the tests and
// the benchmarks run it in-process; `floe enrichd` runs it alone.
type Server struct {
	cfg        ServerConfig
	mu         sync.Mutex // guards rng
	rng        *rand.Rand
	mu0, sigma float64 // of the latency's logarithm (seconds)
	latency    bool
	hdrName    string
	hdrValue   string
	mux        *http.ServeMux
	started    atomic.Int64 // Unix nanoseconds
	outage     atomic.Bool
	requests   atomic.Int64
	hs         *http.Server
	served     chan struct{}
}

// Check reports settings NewServer cannot honour: a rate outside [0, 1],
// or a RequireHeader that is not "Name: value" (which would require
// nothing).
func (c ServerConfig) Check() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error rate", c.ErrorRate}, {"miss rate", c.MissRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("%s %v: want a share from 0 to 1", r.name, r.v)
		}
	}
	if c.RequireHeader != "" {
		if _, _, err := parseAuthHeader(c.RequireHeader); err != nil {
			return fmt.Errorf("required header: %w", err)
		}
	}
	return nil
}

// NewServer returns a server; use it as an http.Handler or call Start. Its
// settings are assumed to pass Check.
func NewServer(cfg ServerConfig) *Server {
	if cfg.P50 == 0 {
		cfg.P50 = 600 * time.Millisecond
	}
	if cfg.P99 == 0 {
		cfg.P99 = 2800 * time.Millisecond
	}
	s := &Server{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		mux: http.NewServeMux(),
	}
	if cfg.P50 > 0 {
		s.latency = true
		s.mu0 = math.Log(cfg.P50.Seconds())
		if cfg.P99 > cfg.P50 {
			// The 99th percentile of a standard normal is 2.3263.
			s.sigma = math.Log(cfg.P99.Seconds()/cfg.P50.Seconds()) / 2.3263
		}
	}
	if cfg.RequireHeader != "" {
		s.hdrName, s.hdrValue, _ = parseAuthHeader(cfg.RequireHeader)
	}
	s.started.Store(time.Now().UnixNano())
	s.mux.HandleFunc("POST /lookup", s.batch)
	return s
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves until Close. It
// returns the base URL: the batch endpoint is url+"/lookup", the single one
// url+"/lookup/{key}". Outage windows count from here.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	s.started.Store(time.Now().UnixNano())
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		_ = s.hs.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close stops a started server: it closes the listener and every
// connection (requests waiting out their latency end at once).
func (s *Server) Close() error {
	if s.hs == nil {
		return nil
	}
	err := s.hs.Close()
	<-s.served
	return err
}

// SetOutage starts or ends an outage (every request answered 503).
func (s *Server) SetOutage(on bool) { s.outage.Store(on) }

// Requests is the number of requests received, of every kind and outcome.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Knows reports whether the server answers key (see ServerConfig.MissRate).
func (s *Server) Knows(key string) bool {
	if s.cfg.MissRate <= 0 {
		return true
	}
	h := hashKey(key) ^ 0x5bd1e9955bd1e995
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return float64(h>>11)/(1<<53) >= s.cfg.MissRate
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if s.hdrName != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(s.hdrName)), []byte(s.hdrValue)) != 1 {
		http.Error(w, "missing or wrong credentials", http.StatusUnauthorized)
		return
	}
	if s.down() {
		http.Error(w, "outage", http.StatusServiceUnavailable)
		return
	}
	// Single mode by hand: ServeMux takes the key "/" (GET /lookup/%2F)
	// for a trailing slash, which a {key} pattern does not match.
	if key, ok := strings.CutPrefix(r.URL.EscapedPath(), "/lookup/"); ok && r.Method == http.MethodGet && !strings.Contains(key, "/") {
		if key, err := url.PathUnescape(key); err == nil && key != "" {
			s.single(w, r, key)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// respond adds the request's latency (or fails it, at the error rate), then
// writes the body. It gives up when the client does: the request's context
// ends when its connection closes, once the request body has been read.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	delay, fail := s.draw()
	if fail {
		http.Error(w, "injected error", http.StatusServiceUnavailable)
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) down() bool {
	if s.outage.Load() {
		return true
	}
	since := time.Duration(time.Now().UnixNano() - s.started.Load())
	for _, o := range s.cfg.Outages {
		if since >= o.Start && since < o.End {
			return true
		}
	}
	return false
}

// draw samples one request's latency and whether it fails.
func (s *Server) draw() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.ErrorRate > 0 && s.rng.Float64() < s.cfg.ErrorRate {
		return 0, true
	}
	if !s.latency {
		return 0, false
	}
	sec := math.Exp(s.mu0 + s.sigma*s.rng.NormFloat64())
	return min(time.Duration(sec*float64(time.Second)), time.Minute), false
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	// Read the whole body first: that also lets the server notice a client
	// that gives up during the latency.
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(raw)
	var keys []*fastjson.Value
	if err == nil {
		keys, err = v.Get("keys").Array()
	}
	if err != nil {
		http.Error(w, `want {"keys":[...]}: `+err.Error(), http.StatusBadRequest)
		return
	}
	// The body is written by hand: encoding/json's reflection would cost the
	// benchmarks, which run this server on the same cores as the pipeline.
	out := make([]byte, 0, 16+len(keys)*160)
	out = append(out, `{"results":{`...)
	first := true
	for _, kv := range keys {
		kb, err := kv.StringBytes()
		if err != nil {
			http.Error(w, "keys must be strings", http.StatusBadRequest)
			return
		}
		k := string(kb)
		if slices.Contains(s.cfg.FailKeys, k) {
			s.cannotAnswer(w, r, k)
			return
		}
		if !s.Knows(k) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendJSONString(out, k)
		out = append(out, ':')
		out = attributesOf(k).appendJSON(out)
	}
	out = append(out, "}}\n"...)
	s.respond(w, r, http.StatusOK, out)
}

// cannotAnswer fails a request that asks for key, one of FailKeys.
func (s *Server) cannotAnswer(w http.ResponseWriter, r *http.Request, key string) {
	s.respond(w, r, http.StatusInternalServerError, append(appendJSONString([]byte(`{"error":`), "cannot answer key "+key), "}\n"...))
}

func (s *Server) single(w http.ResponseWriter, r *http.Request, key string) {
	if slices.Contains(s.cfg.FailKeys, key) {
		s.cannotAnswer(w, r, key)
		return
	}
	if !s.Knows(key) {
		s.respond(w, r, http.StatusNotFound, []byte(`{"error":"unknown key"}`+"\n"))
		return
	}
	s.respond(w, r, http.StatusOK, append(attributesOf(key).appendJSON(nil), '\n'))
}

var (
	segments  = []string{"bronze", "silver", "gold", "platinum"}
	countries = []string{"US", "DE", "FR", "GB", "JP", "BR", "IN", "NL", "SE", "CA", "AU", "ES"}
	epoch2020 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
)

// attributes are what the reference server knows about a key.
type attributes struct {
	segment, country string
	score            float64
	signup           time.Time
	vip              bool
	visits           int64
}

func attributesOf(key string) attributes {
	h := hashKey(key)
	return attributes{
		segment: segments[h%uint64(len(segments))],
		score:   float64((h>>8)%1000) / 1000,
		country: countries[(h>>20)%uint64(len(countries))],
		signup:  epoch2020.Add(time.Duration((h>>28)%(5*365*24*3600)) * time.Second),
		vip:     (h>>52)%10 == 0,
		visits:  int64((h >> 40) % 5000),
	}
}

func (a attributes) appendJSON(b []byte) []byte {
	b = append(b, `{"segment":`...)
	b = appendJSONString(b, a.segment)
	b = append(b, `,"score":`...)
	b = strconv.AppendFloat(b, a.score, 'g', -1, 64)
	b = append(b, `,"country":`...)
	b = appendJSONString(b, a.country)
	b = append(b, `,"signup_ts":"`...)
	b = a.signup.AppendFormat(b, time.RFC3339)
	b = append(b, `","vip":`...)
	b = strconv.AppendBool(b, a.vip)
	b = append(b, `,"visits":`...)
	b = strconv.AppendInt(b, a.visits, 10)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string (s is valid UTF-8: it came
// from a JSON document or a URL path).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// Attributes returns what the reference server answers for a key it knows,
// derived from a hash of the key: segment (string), score (double, 0..1 in
// thousandths), country (string), signup_ts (timestamp, sent as RFC 3339),
// vip (boolean) and visits (long). Tests compare enriched values with it.
func Attributes(key string) map[string]any {
	a := attributesOf(key)
	return map[string]any{
		"segment":   a.segment,
		"score":     a.score,
		"country":   a.country,
		"signup_ts": a.signup,
		"vip":       a.vip,
		"visits":    a.visits,
	}
}

func hashKey(key string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(key))
	return f.Sum64()
}
