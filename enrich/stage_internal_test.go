package enrich

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestKeysAtFault pins which failed probes split their batch: statuses
// the keys asked for may cause, not those of a service that is down,
// refuses the credentials or the URL, or is overloaded, and not a request
// that got no answer.
func TestKeysAtFault(t *testing.T) {
	for code, want := range map[int]bool{
		200: true, 400: true, 413: true, 414: true, 422: true, 431: true, 500: true,
		0: false, 401: false, 403: false, 404: false, 429: false, 501: false, 502: false, 503: false, 504: false,
	} {
		err := fmt.Errorf("wrapped: %w", &RequestError{StatusCode: code})
		if got := keysAtFault(err); got != want {
			t.Errorf("status %d: keysAtFault = %v, want %v", code, got, want)
		}
	}
	if keysAtFault(errors.New("not a request error")) {
		t.Error("an error that is not a RequestError counts as the keys' fault")
	}
}

// TestRetryAfter reads a Retry-After as seconds or an HTTP date, capped at
// maxRetryAfter; anything else, or a time past, is no wait.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"":      0,
		"3":     3 * time.Second,
		"-1":    0,
		"86400": maxRetryAfter,
		"soon":  0,
		now.Add(20 * time.Second).Format(http.TimeFormat): 20 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		now.Add(time.Hour).Format(http.TimeFormat):        maxRetryAfter,
	} {
		if got := retryAfter(h, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", h, got, want)
		}
	}
}
