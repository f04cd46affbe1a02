package enrich_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
)

const secret = "s3cret-t0ken-value"

func TestAuthHeaderSentAndNeverLeaked(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency, RequireHeader: "Authorization: Bearer " + secret})

	t.Run("right", func(t *testing.T) {
		cfg := testConfig(url)
		cfg.AuthHeader = "Authorization: Bearer " + secret
		h := startStage(t, cfg)
		q := h.st.NewQueue()
		if err := q.Submit(context.Background(), "u-1", nil); err != nil {
			t.Fatal(err)
		}
		checkResult(t, srv, "u-1", (<-q.Out()).Result)
		q.Close()
		collect(q)
	})

	t.Run("wrong", func(t *testing.T) {
		const wrong = "wr0ng-" + secret
		cfg := testConfig(url)
		cfg.AuthHeader = "Authorization: Bearer " + wrong
		cfg.Breaker.Policy = enrich.PolicyDLQ
		h := startStage(t, cfg)
		q := h.st.NewQueue()
		if err := q.Submit(context.Background(), "u-1", nil); err != nil {
			t.Fatal(err)
		}
		r := (<-q.Out()).Result
		if r.Status != enrich.StatusDead || r.Err == nil || !strings.Contains(r.Err.Error(), "401") {
			t.Fatalf("got %s (%v), want dead with the 401", r.Status, r.Err)
		}
		q.Close()
		collect(q)
		h.stop()
		if err := h.st.Run(context.Background()); err == nil {
			t.Fatal("a second Run was accepted")
		}
		var cfgLog strings.Builder
		slog.New(slog.NewTextHandler(&cfgLog, nil)).Info("config", "enrich", cfg)
		for what, s := range map[string]string{
			"error": r.Err.Error(), "logs": h.logs.String(),
			"String": cfg.String(), "%v": fmt.Sprintf("%v %+v", cfg, cfg), "LogValue": cfgLog.String(),
		} {
			if strings.Contains(s, secret) {
				t.Errorf("the auth header's value leaked into %s: %s", what, s)
			}
		}
		if !strings.Contains(h.logs.String(), "401") {
			t.Errorf("the failure was not logged: %s", h.logs.String())
		}
	})

	// A server may echo the header in an error: whole, only its token,
	// or cut by the snippet an error shows (256 bytes) or by what is
	// read of the body (4 KiB), which a long token echoed many times
	// brings into the snippet once each echo is scrubbed.
	jwt := strings.Repeat("eyJhbGciOiJIUzI1NiJ9", 20) // 400 bytes
	for _, tc := range []struct {
		name, token string
		body        func(auth string) string
	}{
		{"echoed by the server", secret, func(auth string) string { return "bad request from " + auth }},
		{"token echoed alone", secret, func(string) string { return "invalid token " + secret }},
		{"echo cut by the snippet", secret, func(auth string) string { return strings.Repeat("x", 250) + auth }},
		{"echo cut at the snippet", secret, func(string) string { return strings.Repeat("x", 256-10) + secret }},
		{"long token echoed until the read's end", jwt, func(auth string) string { return strings.Repeat(auth+" ", 20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, tc.body(r.Header.Get("Authorization")), http.StatusBadRequest)
			}))
			defer echo.Close()
			r, h := lookupOnce(t, echo.URL, "Authorization: Bearer "+tc.token)
			if r.Status != enrich.StatusError || r.Err == nil || !strings.Contains(r.Err.Error(), "400") || !strings.Contains(r.Err.Error(), "REDACT") {
				t.Fatalf("got %s (%v), want the 400 with the echo redacted", r.Status, r.Err)
			}
			for n := 8; n <= len(tc.token); n++ { // every piece that could be told from noise
				for i := 0; i+n <= len(tc.token); i += n {
					if piece := tc.token[i : i+n]; strings.Contains(r.Err.Error(), piece) || strings.Contains(h.logs.String(), piece) {
						t.Fatalf("%q of the auth header leaked: %v", piece, r.Err)
					}
				}
			}
			if len(r.Err.Error()) > 400 {
				t.Fatalf("error of %d bytes: want the body cut", len(r.Err.Error()))
			}
		})
	}

	// A redirect is not followed: the header would go to another host,
	// and Authorization over plain http to the same one.
	t.Run("redirect", func(t *testing.T) {
		var elsewhere atomic.Int32
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere.Add(1)
		}))
		defer other.Close()
		moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/lookup", http.StatusTemporaryRedirect)
		}))
		defer moved.Close()
		r, _ := lookupOnce(t, moved.URL, "X-Api-Key: "+secret)
		var re *enrich.RequestError
		if r.Status != enrich.StatusError || !errors.As(r.Err, &re) || re.Retryable ||
			!strings.Contains(re.Error(), "does not follow redirects") || !strings.Contains(re.Error(), other.URL) {
			t.Fatalf("got %s (%v), want a permanent error naming the redirect", r.Status, r.Err)
		}
		if n := elsewhere.Load(); n != 0 {
			t.Fatalf("the redirect's target got %d requests", n)
		}
	})
}

// lookupOnce looks up one key at the service at url with auth header auth
// (none: "") and policy passthrough, and returns its result and the
// stopped stage's harness.
func lookupOnce(t *testing.T, url, auth string) (enrich.Result, *harness) {
	t.Helper()
	cfg := testConfig(url)
	cfg.AuthHeader = auth
	cfg.Breaker.Policy = enrich.PolicyPassthrough
	return lookupOnceWith(t, cfg)
}

// lookupOnceWith looks key u-1 up once through a stage of cfg, which it
// stops, and returns the result and the stage's harness (its logs).
func lookupOnceWith(t *testing.T, cfg enrich.Config) (enrich.Result, *harness) {
	t.Helper()
	h := startStage(t, cfg)
	q := h.st.NewQueue()
	if err := q.Submit(context.Background(), "u-1", nil); err != nil {
		t.Fatal(err)
	}
	r := (<-q.Out()).Result
	q.Close()
	collect(q)
	h.stop()
	return r, h
}

// selfSigned writes a self-signed certificate for 127.0.0.1, usable by a
// server and as a client certificate, and returns its paths.
func selfSigned(t *testing.T) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floe enrich test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

func TestMutualTLSWithCAFile(t *testing.T) {
	certFile, keyFile, cert := selfSigned(t)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	ref := enrich.NewServer(enrich.ServerConfig{P50: enrich.NoLatency})
	ts := httptest.NewUnstartedServer(ref)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	t.Run("trusted, with client certificate", func(t *testing.T) {
		cfg := testConfig(ts.URL)
		cfg.TLS = enrich.TLSConfig{CAFile: certFile, CertFile: certFile, KeyFile: keyFile}
		h := startStage(t, cfg)
		q := h.st.NewQueue()
		for i := range 20 {
			if err := q.Submit(context.Background(), key(i), nil); err != nil {
				t.Fatal(err)
			}
		}
		q.Close()
		for i, c := range collect(q) {
			checkResult(t, ref, key(i), c.Result)
		}
	})

	t.Run("unknown authority is permanent", func(t *testing.T) {
		r, h := lookupOnce(t, ts.URL, "")
		var re *enrich.RequestError
		if r.Status != enrich.StatusError || !errors.As(r.Err, &re) || re.Retryable || !strings.Contains(re.Error(), "certificate") {
			t.Fatalf("got %s (%v), want a permanent certificate error", r.Status, r.Err)
		}
		if h.metric(t, "floe_enrich_retries_total") != 0 {
			t.Fatal("a certificate error was retried")
		}
	})

	t.Run("bad files name the key", func(t *testing.T) {
		cfg := testConfig(ts.URL)
		cfg.TLS.CAFile = filepath.Join(t.TempDir(), "missing.pem")
		if _, err := enrich.NewStage(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "enrich.tls.ca_file") {
			t.Fatalf("NewStage: %v", err)
		}
		cfg.TLS = enrich.TLSConfig{CertFile: keyFile, KeyFile: certFile}
		if _, err := enrich.NewStage(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "enrich.tls.cert_file") {
			t.Fatalf("NewStage: %v", err)
		}
	})
}

// TestURLCredentialsNeverLeaked: credentials in enrich.url itself, a token
// in its query or a password in its user info, stay out of errors (and so
// of dead letters' floe.detail), logs and the printed configuration.
// Before, a transport error quoted the whole URL (net/http hides only a
// user-info password), a password that url.Parse refuses was quoted whole
// by the config error, and a server echoing the Basic credentials net/http
// makes of the user info had them logged.
func TestURLCredentialsNeverLeaked(t *testing.T) {
	t.Run("token in the query", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		_ = l.Close()
		for _, mode := range []string{enrich.ModeBatch, enrich.ModeSingle} {
			cfg := testConfig(closed)
			cfg.URL += "?api_key=" + secret
			if cfg.Mode = mode; mode == enrich.ModeSingle {
				cfg.URL = closed + "/users/{key}?api_key=" + secret
			}
			cfg.Retries = -1
			cfg.Breaker.Policy = enrich.PolicyDLQ
			r, h := lookupOnceWith(t, cfg)
			if r.Err == nil || !strings.Contains(r.Err.Error(), "api_key=REDACTED") {
				t.Fatalf("%s: got %s (%v), want an error naming the URL redacted", mode, r.Status, r.Err)
			}
			for what, s := range map[string]string{"error": r.Err.Error(), "logs": h.logs.String(), "String": cfg.String()} {
				if strings.Contains(s, secret) || strings.Contains(s, "u-1") {
					t.Errorf("%s: the query's token or the key leaked into %s: %s", mode, what, s)
				}
			}
		}
	})

	t.Run("password that does not parse", func(t *testing.T) {
		for _, pw := range []string{"pa%ss-" + secret, "pa ss-" + secret, "pa#ss-" + secret} {
			cfg := testConfig("https://floe:" + pw + "@lookup.example.com")
			err := cfg.Finish()
			if err == nil || !strings.Contains(err.Error(), "lookup.example.com") {
				t.Fatalf("%q: got %v, want enrich.url refused", pw, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the password leaked into the config error: %v", err)
			}
		}
	})

	t.Run("user info echoed as Basic credentials", func(t *testing.T) {
		echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pw, _ := r.BasicAuth()
			http.Error(w, "bad request from "+r.Header.Get("Authorization")+" alias "+user+":"+pw, http.StatusBadRequest)
		}))
		defer echo.Close()
		r, h := lookupOnce(t, strings.Replace(echo.URL, "http://", "http://floe:"+secret+"@", 1), "")
		if r.Err == nil || !strings.Contains(r.Err.Error(), "400") {
			t.Fatalf("got %s (%v), want the 400", r.Status, r.Err)
		}
		basic := base64.StdEncoding.EncodeToString([]byte("floe:" + secret))
		for what, s := range map[string]string{"error": r.Err.Error(), "logs": h.logs.String()} {
			if strings.Contains(s, basic) || strings.Contains(s, secret) {
				t.Errorf("the user info's credentials leaked into %s: %s", what, s)
			}
		}
	})
}

// TestPlainHTTPCredentialsWarned: credentials sent over plain http are
// warned about at start, whichever way the scheme is written and whether
// they come from auth_header or from the URL's user info. Before, only a
// URL beginning with the lower-case "http://" and an auth_header were.
func TestPlainHTTPCredentialsWarned(t *testing.T) {
	for _, tc := range []struct {
		url, auth string
		warned    bool
	}{
		{"http://127.0.0.1:9/lookup", "Authorization: Bearer " + secret, true},
		{"HTTP://127.0.0.1:9/lookup", "Authorization: Bearer " + secret, true},
		{"http://floe:" + secret + "@127.0.0.1:9/lookup", "", true},
		{"http://" + secret + "@127.0.0.1:9/lookup", "", true},
		{"https://127.0.0.1:9/lookup", "Authorization: Bearer " + secret, false},
		{"http://127.0.0.1:9/lookup", "", false},
	} {
		cfg := testConfig("")
		cfg.URL, cfg.AuthHeader = tc.url, tc.auth
		if err := cfg.Finish(); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		h := startStage(t, cfg)
		h.stop()
		if got := strings.Contains(h.logs.String(), "plain http"); got != tc.warned {
			t.Errorf("%s (auth_header %t): warned %t, want %t: %s", tc.url, tc.auth != "", got, tc.warned, h.logs.String())
		}
		if strings.Contains(h.logs.String(), secret) {
			t.Errorf("%s: the warning holds the credentials: %s", tc.url, h.logs.String())
		}
	}
}

// TestUserInfoNameNeverLeaked: an API key given as the URL's user info name,
// https://KEY@host or curl's https://KEY:@host, which net/http sends as
// Basic credentials, stays out of errors and logs, and the errors stay
// readable. Before, the name was shown in every transport error, and an
// empty password was scrubbed as a secret: REDACTED between every byte of
// every error, the key still spelled out.
func TestUserInfoNameNeverLeaked(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		http.Error(w, "service down for "+r.Header.Get("Authorization")+" alias "+user, http.StatusServiceUnavailable)
	}))
	defer echo.Close()
	for _, ui := range []string{secret + "@", secret + ":@"} {
		for _, tc := range []struct{ name, url, want string }{
			{"transport error", closed, "connection refused"},
			{"echoed", echo.URL, "service down for REDACTED alias REDACTED"},
		} {
			r, h := lookupOnce(t, strings.Replace(tc.url, "http://", "http://"+ui, 1), "")
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("%s, %s: got %s (%v), want an error holding %q", ui, tc.name, r.Status, r.Err, tc.want)
			}
			basic := base64.StdEncoding.EncodeToString([]byte(secret + ":"))
			for what, s := range map[string]string{"error": r.Err.Error(), "logs": h.logs.String()} {
				if strings.Contains(s, secret) || strings.Contains(s, basic) {
					t.Errorf("%s, %s: the user info's name leaked into %s: %s", ui, tc.name, what, s)
				}
			}
		}
	}
}

// TestQueryTokenEchoNeverLeaked: a token in enrich.url's query stays out of
// errors (and so of dead letters' floe.detail) and logs when the service
// echoes it: in a redirect's Location (an http to https upgrade keeps the
// query) or in an error body, raw or decoded. Before, only the URL floe
// formats itself was redacted; an echo was shown as the service sent it.
func TestQueryTokenEchoNeverLeaked(t *testing.T) {
	const token = "s3cret/t0ken+value" // sent percent-encoded
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"https upgrade", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusMovedPermanently)
		}, "lookup?api_key=REDACTED"},
		{"request echoed", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no route for "+r.Method+" "+r.URL.RequestURI(), http.StatusBadRequest)
		}, "no route for POST /lookup?api_key=REDACTED"},
		{"token echoed decoded", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "unknown api_key "+r.URL.Query().Get("api_key"), http.StatusForbidden)
		}, "unknown api_key REDACTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			cfg := testConfig(srv.URL)
			cfg.URL += "?api_key=" + url.QueryEscape(token)
			cfg.Retries = -1
			cfg.Breaker.Policy = enrich.PolicyDLQ
			r, h := lookupOnceWith(t, cfg)
			if r.Status != enrich.StatusDead || r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("got %s (%v), want a dead letter's error holding %q", r.Status, r.Err, tc.want)
			}
			for what, s := range map[string]string{"error": r.Err.Error(), "logs": h.logs.String()} {
				if strings.Contains(s, token) || strings.Contains(s, url.QueryEscape(token)) {
					t.Errorf("the query's token leaked into %s: %s", what, s)
				}
			}
		})
	}
}

// TestNonJSONAnswerNeverLeaksTheAuthHeader: a 200 answer that is not JSON
// (a login page echoing the token) fails with the start of its body,
// scrubbed, and nothing of the token. Before, the error quoted fastjson's
// message, which shows the body's first and last 40 bytes around "...": an
// echoed token cut in two there was not recognised, and its halves shown.
func TestNonJSONAnswerNeverLeaksTheAuthHeader(t *testing.T) {
	token := strings.Repeat("eyJhbGciOiJIUzI1NiJ9", 19) + secret // 398 bytes
	for _, tc := range []struct {
		name string
		body func(auth string) string
	}{
		{"echoed once", func(auth string) string { return "<html>session expired for " + auth + "</html>" }},
		// Scrubbed, the echoes shrink, and the one cut by what is read
		// of the body (4 KiB) comes into what is shown.
		{"echoed until the read's end", func(auth string) string { return strings.Repeat(auth+" ", 20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.body(r.Header.Get("Authorization")))
			}))
			defer srv.Close()
			r, h := lookupOnce(t, srv.URL, "Authorization: Bearer "+token)
			if r.Status != enrich.StatusError || r.Err == nil || !strings.Contains(r.Err.Error(), "decoding the response: not JSON") {
				t.Fatalf("got %s (%v), want the answer refused as not JSON", r.Status, r.Err)
			}
			if !strings.Contains(r.Err.Error(), "REDACTED") {
				t.Errorf("the error shows no scrubbed start of the body: %v", r.Err)
			}
			for n := 8; n <= len(token); n++ { // every piece that could be told from noise
				for i := 0; i+n <= len(token); i += n {
					if piece := token[i : i+n]; strings.Contains(r.Err.Error(), piece) || strings.Contains(h.logs.String(), piece) {
						t.Fatalf("%q of the auth header leaked: %v", piece, r.Err)
					}
				}
			}
		})
	}
}

// TestJSONEscapedEchoOfTheAuthHeaderNeverLeaks: a service echoing the auth
// header in a JSON error body escapes it as its JSON encoder does (PHP's
// json_encode writes / as \/, .NET's System.Text.Json + as \u002B); no
// piece of the token reaches the error (under policy dlq, every dead
// letter's detail) or the log. Before, only its verbatim form was scrubbed.
func TestJSONEscapedEchoOfTheAuthHeaderNeverLeaks(t *testing.T) {
	const token = "Zm9vYmFyYmF6/cXV4cXV1eA+aGVsbG93b3JsZA=="
	for name, esc := range map[string]func(string) string{
		`PHP \/`:      func(s string) string { return strings.ReplaceAll(s, "/", `\/`) },
		`.NET \u002B`: func(s string) string { return strings.ReplaceAll(s, "+", `\u002B`) },
	} {
		t.Run(name, func(t *testing.T) {
			echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":"invalid credentials","authorization":"` + esc(r.Header.Get("Authorization")) + `"}`))
			}))
			defer echo.Close()
			cfg := testConfig(echo.URL)
			cfg.AuthHeader = "Authorization: Bearer " + token
			cfg.Breaker.Policy = enrich.PolicyDLQ
			r, h := lookupOnceWith(t, cfg)
			if r.Err == nil {
				t.Fatalf("got %s without an error", r.Status)
			}
			t.Logf("error: %v", r.Err)
			for n := 8; n <= len(token); n++ {
				for i := 0; i+n <= len(token); i++ {
					if piece := token[i : i+n]; strings.Contains(r.Err.Error(), piece) || strings.Contains(h.logs.String(), piece) {
						t.Fatalf("%q of the auth header leaked: %v", piece, r.Err)
					}
				}
			}
		})
	}
}
