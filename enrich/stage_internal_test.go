package enrich

import (
	"errors"
	"fmt"
	"testing"
)

// TestKeysAtFault pins which failed probes split their batch: statuses
// the keys asked for may cause, not those of a service that is down,
// refuses the credentials or the URL, or is overloaded, and not a request
// that got no answer.
func TestKeysAtFault(t *testing.T) {
	for code, want := range map[int]bool{
		200: true, 400: true, 413: true, 422: true, 500: true,
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
