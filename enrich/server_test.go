package enrich_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
)

func TestServerContract(t *testing.T) {
	srv, base := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency, MissRate: 0.3, RequireHeader: "X-Key: k1"})
	var known, unknown string
	for i := 0; known == "" || unknown == ""; i++ {
		if srv.Knows(key(i)) {
			known = key(i)
		} else {
			unknown = key(i)
		}
	}
	do := func(method, u string, body []byte, hdr bool) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, u, bytes.NewReader(body))
		if hdr {
			req.Header.Set("X-Key", "k1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, body := do("POST", base+"/lookup", []byte(`{"keys":["`+known+`","`+unknown+`"]}`), true)
	var got struct {
		Results map[string]map[string]any `json:"results"`
	}
	if err := json.Unmarshal(body, &got); code != 200 || err != nil {
		t.Fatalf("batch: %d %s %v", code, body, err)
	}
	if _, ok := got.Results[unknown]; ok || len(got.Results) != 1 || got.Results[known]["segment"] != enrich.Attributes(known)["segment"] {
		t.Fatalf("batch results %v", got.Results)
	}
	if code, _ := do("GET", base+"/lookup/"+url.PathEscape(known), nil, true); code != 200 {
		t.Fatalf("single known: %d", code)
	}
	if code, _ := do("GET", base+"/lookup/"+unknown, nil, true); code != 404 {
		t.Fatalf("single unknown: %d", code)
	}
	if code, _ := do("POST", base+"/lookup", []byte(`{"keys":[]}`), false); code != 401 {
		t.Fatalf("without the header: %d", code)
	}
	if code, _ := do("POST", base+"/lookup", []byte(`nope`), true); code != 400 {
		t.Fatalf("bad body: %d", code)
	}
	srv.SetOutage(true)
	if code, _ := do("POST", base+"/lookup", []byte(`{"keys":[]}`), true); code != 503 {
		t.Fatalf("outage: %d", code)
	}
	srv.SetOutage(false)
	if n := srv.Requests(); n != 6 {
		t.Fatalf("Requests() = %d, want 6", n)
	}
}

// TestServerSingleModeKeysWithSlashes: the reference server answers single
// mode's GET for every key the client escapes into the path, "/" alone
// included. ServeMux took GET /lookup/%2F for a trailing slash, which
// {key} did not match: a 404, so a known key came out a miss.
func TestServerSingleModeKeysWithSlashes(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	cfg := testConfig(url)
	cfg.Mode = enrich.ModeSingle
	cfg.URL = url + "/lookup/{key}"
	h := startStage(t, cfg)
	q := h.st.NewQueue()
	keys := []string{"a/b", "/", "//", "a%2Fb", "é/ü"}
	for _, k := range keys {
		if err := q.Submit(context.Background(), k, k); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	got := collect(q)
	if len(got) != len(keys) {
		t.Fatalf("%d results for %d keys", len(got), len(keys))
	}
	for _, c := range got {
		checkResult(t, srv, c.Item.(string), c.Result)
	}
}

func TestServerOutageWindowAndLatency(t *testing.T) {
	srv, base := startServer(t, enrich.ServerConfig{
		P50: 40 * time.Millisecond, P99: 40 * time.Millisecond,
		Outages: []enrich.Outage{{Start: 0, End: 500 * time.Millisecond}},
	})
	post := func() int {
		resp, err := http.Post(base+"/lookup", "application/json", bytes.NewReader([]byte(`{"keys":["u-1"]}`)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != 503 {
		t.Fatalf("inside the outage window: %d", code)
	}
	time.Sleep(550 * time.Millisecond)
	start := time.Now()
	if code := post(); code != 200 {
		t.Fatalf("after the outage window: %d", code)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("answered in %s, want the 40ms latency", d)
	}
	_ = srv
}

func TestServerCloseEndsSlowRequests(t *testing.T) {
	srv := enrich.NewServer(enrich.ServerConfig{P50: time.Minute, P99: time.Minute})
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(base+"/lookup", "application/json", bytes.NewReader([]byte(`{"keys":["u-1"]}`)))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for srv.Requests() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("a request outlived Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %s", d)
	}
}

func TestAttributesAreDeterministic(t *testing.T) {
	a, b := enrich.Attributes("u-42"), enrich.Attributes("u-42")
	for k, v := range a {
		if b[k] != v {
			t.Fatalf("%s: %v then %v", k, v, b[k])
		}
	}
	if len(a) != 6 {
		t.Fatalf("attributes %v", a)
	}
}

// TestServerConfigCheck: settings the reference server cannot honour are
// refused (floe enrichd exits with the reason); a required header that is
// not "Name: value" used to require nothing at all.
func TestServerConfigCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  enrich.ServerConfig
		want string
	}{
		{enrich.ServerConfig{RequireHeader: "Bearer s3cret"}, `required header: want "Name: value"`},
		{enrich.ServerConfig{ErrorRate: 1.5}, "error rate 1.5: want a share from 0 to 1"},
		{enrich.ServerConfig{MissRate: math.NaN()}, "miss rate NaN"},
	} {
		if err := c.cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (enrich.ServerConfig{RequireHeader: "X-Key: k1", ErrorRate: 1, MissRate: 0.3}).Check(); err != nil {
		t.Errorf("a good configuration: %v", err)
	}
}
