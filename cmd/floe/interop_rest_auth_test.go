package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestRESTCatalogTLSAndToken: floe reaches the real REST catalog fixture
// through HTTPS with a private CA (SSL_CERT_FILE, Go's standard) and a
// bearer token from the environment, as in front of a production catalog.
// The gateway in front of the fixture refuses any request without the
// token. A wrong token fails `floe run` with a clear error that does not
// contain it.
func TestRESTCatalogTLSAndToken(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test with the REST catalog skipped in -short mode")
	}
	const token = "s3cr3t-rest-token"
	rest := infra.StartREST(t, "file://"+filepath.Join(t.TempDir(), "warehouse"))
	upstream, err := url.Parse(rest.URI)
	if err != nil {
		t.Fatal(err)
	}
	var authorized, refused atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	gw := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"missing or wrong bearer token","type":"NotAuthorizedException","code":401}}`))
			return
		}
		authorized.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	gw.StartTLS()
	defer gw.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gw.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)

	e := newEnv(t, 3, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 100, MalformedRate: 0.01, Seed: 21})
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 1500, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	e.config = writeConfigCatalog(t, e.dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks",
		map[string]string{"type": "rest", "uri": gw.URL, "token": "${REST_TOKEN}"}, "", "commit:\n  interval: 300ms\n")
	// The checker reads the table from the fixture directly.
	e.catalog = map[string]string{"type": "rest", "uri": rest.URI}

	t.Setenv("REST_TOKEN", "not-the-token")
	bad := e.start("wrong-token", "run", "--until-caught-up")
	if err := bad.wait(t, 60*time.Second); err == nil {
		t.Fatal("floe run with a wrong catalog token succeeded")
	}
	if out := bad.output(); !strings.Contains(out, "NotAuthorizedException") {
		t.Errorf("a wrong token does not say the catalog refused it:\n%s", out)
	} else if strings.Contains(out, "not-the-token") {
		t.Errorf("the token appears in floe's output:\n%s", out)
	}
	if refused.Load() == 0 {
		t.Fatal("the gateway refused nothing: floe did not go through it")
	}

	t.Setenv("REST_TOKEN", token)
	good := e.start("token", "run", "--until-caught-up")
	if err := good.wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run over HTTPS with the token: %v\n%s", err, good.output())
	}
	if strings.Contains(good.output(), token) {
		t.Errorf("the token appears in floe's output")
	}
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	if rows+dead != 1500 || authorized.Load() == 0 {
		t.Fatalf("%d rows + %d dead letters of 1500, %d authorized catalog requests", rows, dead, authorized.Load())
	}
}
