package lakehouse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// TestRESTCatalogCredentialsStayAtItsOrigin: a REST catalog that answers
// with a redirect to another host gets its client refused, naming the
// target, and the other host never sees the token. Before, iceberg-go's
// session transport added the token to the redirected request too, so
// whoever the 3xx named (over http:// as well) received it. An OAuth2
// token endpoint on its own host (oauth2-server-uri) is still reached,
// and the token it hands out is sent with the first request, GET
// /v1/config.
func TestRESTCatalogCredentialsStayAtItsOrigin(t *testing.T) {
	const token = "cat-t0ken-s3cret"
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
	}))
	t.Cleanup(other.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	_, err := lakehouse.OpenCatalog(context.Background(), map[string]string{"type": "rest", "uri": redirecting.URL, "token": token})
	if err == nil || !strings.Contains(err.Error(), "refusing a request to "+other.URL) {
		t.Errorf("got %v, want the redirect to %s refused", err, other.URL)
	}
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("the error holds the token: %v", err)
	}
	if got := leaked.Load(); got != nil {
		t.Errorf("the redirect's target got a request (Authorization %q)", got)
	}

	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"issued-t0ken","token_type":"bearer","expires_in":3600}`))
	}))
	t.Cleanup(auth.Close)
	cat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer issued-t0ken" {
			http.Error(w, `{"error":{"message":"no token","type":"NotAuthorizedException","code":401}}`, http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
	}))
	t.Cleanup(cat.Close)
	c, err := lakehouse.OpenCatalog(context.Background(), map[string]string{
		"type": "rest", "uri": cat.URL, "credential": "floe:s3cret", "oauth2-server-uri": auth.URL + "/token",
	})
	if err != nil {
		t.Fatalf("with an OAuth2 server on another host: %v", err)
	}
	if cl, ok := c.(interface{ Close() error }); ok {
		_ = cl.Close()
	}
}

// TestRESTCatalogURIPasswordNotInError: a uri whose password does not
// parse is named redacted. Before, url.Parse's error quoted it whole in
// the "loading rest catalog" error floe run exits with.
func TestRESTCatalogURIPasswordNotInError(t *testing.T) {
	_, err := lakehouse.OpenCatalog(context.Background(), map[string]string{"type": "rest", "uri": "https://floe:pa%ss-w0rd@catalog.example.com:8181"})
	if err == nil || strings.Contains(err.Error(), "w0rd") || !strings.Contains(err.Error(), "catalog.example.com:8181") {
		t.Errorf("got %v, want an error naming the uri without its password", err)
	}
}

// TestRESTCatalogInsecureSettingsWarned: opening a REST catalog whose
// certificate is not checked, or whose credentials go over plain http,
// logs a warning naming the setting, and a safe one logs none. Before,
// neither was warned about.
func TestRESTCatalogInsecureSettingsWarned(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	for _, tc := range []struct {
		name  string
		props map[string]string
		want  []string
	}{
		{"skip-verify", map[string]string{"type": "rest", "uri": "https://" + closed, "rest.tls.skip-verify": "true"}, []string{"rest.tls.skip-verify is on"}},
		{"token over http", map[string]string{"type": "rest", "uri": "http://" + closed, "token": "t0ken"}, []string{"plain http", "table.catalog.uri"}},
		{"credential to an http token endpoint", map[string]string{"uri": "https://" + closed, "credential": "id:s3cret", "oauth2-server-uri": "http://" + closed + "/token"}, []string{"plain http", "table.catalog.oauth2-server-uri"}},
		{"user info over http", map[string]string{"type": "rest", "uri": "http://floe:pw@" + closed}, []string{"plain http"}},
		{"no credentials over http", map[string]string{"type": "rest", "uri": "http://" + closed}, nil},
		{"token over https", map[string]string{"type": "rest", "uri": "https://" + closed, "token": "t0ken"}, nil},
	} {
		var logs bytes.Buffer
		_, err := lakehouse.Open(context.Background(), lakehouse.Config{
			Table: "db.events", Group: "g", Catalog: tc.props, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		}, sc)
		if err == nil || !strings.Contains(err.Error(), "loading") {
			t.Fatalf("%s: got %v, want the catalog at a closed port failing to load", tc.name, err)
		}
		got := logs.String()
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: logged %q, want nothing", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: logged %q, want a warning with %q", tc.name, got, w)
			}
		}
	}
}

// TestRESTCatalogErrorsHideCredentials: a REST catalog (or the gateway in
// front of it) whose refusals echo the credentials it got — the token in
// its error message, a header.* value, an OAuth2 client secret in the
// token endpoint's error_description — fails loading the catalog, or the
// table, with errors that show none of them and still wrap iceberg-go's
// sentinels. Before, iceberg-go's errors carried the server's text as it
// came, and floe exited with it and logged it at every retried flush.
func TestRESTCatalogErrorsHideCredentials(t *testing.T) {
	const token, apiKey, clientSecret = "cat-t0ken-s3cret", "api-k3y-s3cret", "cl13nt-s3cret"
	var configOK atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/oauth/tokens") {
			_ = r.ParseForm()
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client",
				"error_description": "client " + r.PostForm.Get("client_id") + " with secret " + r.PostForm.Get("client_secret") + " is unknown"})
			return
		}
		if r.URL.Path == "/v1/config" && configOK.Load() {
			_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": "NotAuthorizedException", "code": 401,
			"message": "rejected " + r.Header.Get("Authorization") + " with X-Api-Key " + r.Header.Get("X-Api-Key")}})
	}))
	t.Cleanup(srv.Close)
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	withToken := map[string]string{"type": "rest", "uri": srv.URL, "token": token, "header.X-Api-Key": apiKey}
	for _, tc := range []struct {
		name     string
		props    map[string]string
		configOK bool
		want     error
	}{
		{"loading the catalog", withToken, false, rest.ErrUnauthorized},
		{"loading the table", withToken, true, rest.ErrUnauthorized},
		{"the OAuth2 token", map[string]string{"type": "rest", "uri": srv.URL, "credential": "floe:" + clientSecret}, false, rest.ErrOAuthError},
	} {
		configOK.Store(tc.configOK)
		_, err := lakehouse.Open(context.Background(), lakehouse.Config{Table: "db.events", Group: "g", Catalog: tc.props}, sc)
		if err == nil || !strings.Contains(err.Error(), "rejected") && !strings.Contains(err.Error(), "is unknown") {
			t.Fatalf("%s: got %v, want the server's refusal", tc.name, err)
		}
		for _, secret := range []string{token, apiKey, clientSecret} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error holds %q: %v", tc.name, secret, err)
			}
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v is not %v", tc.name, err, tc.want)
		}
	}
}

// TestRESTCatalogErrorsHideIssuedOAuthToken: with credential: id:secret
// iceberg-go exchanges the secret for an access token at /v1/oauth/tokens
// and sends it as "Authorization: Bearer ..." on every catalog call; a
// catalog (or gateway) echoing the Authorization it got in its refusal
// does not get that token printed, neither a token that lasts nor one
// refreshed at every call. Before, only the static token and the secret
// of credential were masked, and the issued token, as good as token: for
// its lifetime, was in the error floe exits with and logs at every
// retried flush ("loading table db.events: NotAuthorizedException:
// rejected Bearer issued-...").
func TestRESTCatalogErrorsHideIssuedOAuthToken(t *testing.T) {
	const clientSecret, issued = "cl13nt-s3cret", "issued-acc3ss-t0ken"
	var expiresIn atomic.Int64
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/oauth/tokens"):
			// oauth2 refreshes a token within 10 s of its expiry: one
			// that expires in 1 s is fetched again for every call.
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("%s-%d", issued, n.Add(1)), "token_type": "bearer",
				"expires_in": expiresIn.Load(), "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
		case r.URL.Path == "/v1/config":
			_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": "NotAuthorizedException", "code": 401,
				"message": "rejected " + r.Header.Get("Authorization")}})
		}
	}))
	t.Cleanup(srv.Close)
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{"type": "rest", "uri": srv.URL, "credential": "floe:" + clientSecret}
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "rejected Bearer REDACTED") {
			t.Fatalf("%s: got %v, want the server's refusal, its token masked", what, err)
		}
		for _, secret := range []string{clientSecret, issued} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error holds %q: %v", what, secret, err)
			}
		}
		if !errors.Is(err, rest.ErrUnauthorized) {
			t.Errorf("%s: %v is not %v", what, err, rest.ErrUnauthorized)
		}
	}
	expiresIn.Store(3600)
	_, err = lakehouse.Open(context.Background(), lakehouse.Config{Table: "db.events", Group: "g", Catalog: props}, sc)
	check("a lasting token", err)

	expiresIn.Store(1)
	cat, err := lakehouse.OpenCatalog(context.Background(), props)
	if err != nil {
		t.Fatal(err)
	}
	before := n.Load()
	for i := range 12 {
		_, err := cat.LoadTable(context.Background(), []string{"db", "events"})
		check(fmt.Sprintf("call %d with a refreshed token", i), err)
	}
	if got := n.Load() - before; got < 12 {
		t.Errorf("%d tokens issued for 12 calls, want one each", got)
	}
}

// TestRESTCatalogKeyAsURIUserIsHidden: an API key given as the uri's user
// name alone (https://KEY@host, or KEY:@host), which net/http quotes in
// its errors as it is (it masks passwords only), is not in the error of a
// catalog that cannot be reached. Only a password was scrubbed.
func TestRESTCatalogKeyAsURIUserIsHidden(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	for _, uri := range []string{"http://k3y-s3cret@" + addr, "http://k3y-s3cret:@" + addr, "http://floe:pw-s3cret@" + addr} {
		_, err := lakehouse.OpenCatalog(t.Context(), map[string]string{"type": "rest", "uri": uri})
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("uri %s: %v, want an error without the credential", uri, err)
		}
	}
}

// TestRESTCatalogFromIcebergGoConfigFile: a REST catalog whose uri,
// credential and warehouse are in iceberg-go's configuration file
// (.iceberg-go.yaml for the catalog named "floe") gets all three, as a sql
// catalog does through catalog.Load: floe opens REST catalogs itself, and
// took only the uri from the file, so the catalog saw no token and no
// warehouse. iceberg-go reads the file when it starts, so the test runs
// itself again in a child process with GOICEBERG_HOME set.
func TestRESTCatalogFromIcebergGoConfigFile(t *testing.T) {
	if os.Getenv("FLOE_TEST_ICEBERG_HOME") != "" {
		c, err := lakehouse.OpenCatalog(context.Background(), map[string]string{"type": "rest"})
		if err != nil {
			t.Fatal(err)
		}
		if cl, ok := c.(interface{ Close() error }); ok {
			_ = cl.Close()
		}
		return
	}
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/oauth/tokens") {
			_, _ = w.Write([]byte(`{"access_token":"issued-t0ken","token_type":"bearer","expires_in":3600}`))
			return
		}
		asked.Add(1)
		switch {
		case r.Header.Get("Authorization") != "Bearer issued-t0ken":
			http.Error(w, `{"error":{"message":"no token","type":"NotAuthorizedException","code":401}}`, http.StatusUnauthorized)
		case r.URL.Query().Get("warehouse") != "wh1":
			http.Error(w, `{"error":{"message":"warehouse is required","type":"BadRequestException","code":400}}`, http.StatusBadRequest)
		default:
			_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
		}
	}))
	t.Cleanup(srv.Close)
	home := t.TempDir()
	cfg := "catalog:\n  floe:\n    type: rest\n    uri: " + srv.URL + "\n    credential: floe:s3cret\n    warehouse: wh1\n"
	if err := os.WriteFile(filepath.Join(home, ".iceberg-go.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRESTCatalogFromIcebergGoConfigFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FLOE_TEST_ICEBERG_HOME="+home, "GOICEBERG_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil || asked.Load() == 0 {
		t.Fatalf("a REST catalog whose uri, credential and warehouse are in .iceberg-go.yaml: %v (%d requests to the catalog)\n%s", err, asked.Load(), out)
	}
}

// TestStalledRESTCatalogBoundsTableCreation: a REST catalog that takes a
// request and never answers it makes Open fail on the call timeout (after
// its tries to create the table), whether it stalls on the opening GET
// /v1/config or on the namespace calls a table's creation starts with. Only loads, commits and the table's own
// creation were bounded: a first run hung at start-up until killed.
func TestStalledRESTCatalogBoundsTableCreation(t *testing.T) {
	lakehouse.SetCatalogCallTimeout(t, 300*time.Millisecond)
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	for _, stall := range []string{"/v1/config", "/v1/namespaces"} {
		t.Run(stall, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case strings.HasPrefix(r.URL.Path, stall) && !strings.Contains(r.URL.Path, "/tables/"):
					select {
					case <-release:
					case <-r.Context().Done():
					}
				case r.URL.Path == "/v1/config":
					_, _ = w.Write([]byte(`{"defaults":{},"overrides":{}}`))
				case strings.Contains(r.URL.Path, "/tables/"):
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(`{"error":{"message":"no such table","type":"NoSuchTableException","code":404}}`))
				default:
					w.WriteHeader(http.StatusInternalServerError)
				}
			}))
			t.Cleanup(func() { close(release); srv.Close() })
			done := make(chan error, 1)
			go func() {
				_, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "db.events", Group: "g",
					Catalog: map[string]string{"type": "rest", "uri": srv.URL}}, sc)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Open: %v, want the call timeout's deadline", err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("Open still waiting for a catalog stalled on %s after a minute; the call timeout is 300 ms", stall)
			}
		})
	}
}
