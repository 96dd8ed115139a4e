package engine

import (
	"testing"
	"time"
)

// TestRetryWaitStopsAtTheDeadline: a step's backoff never carries its next
// attempt past the operation's deadline.
func TestRetryWaitStopsAtTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		drawn, left, want time.Duration
	}{
		{drawn: 80 * time.Millisecond, left: 2 * time.Second, want: 81 * time.Millisecond},
		{drawn: 12 * time.Second, left: 300 * time.Millisecond, want: 301 * time.Millisecond},
		{drawn: 5 * time.Second, left: -time.Second, want: time.Millisecond},
		{drawn: 0, left: 0, want: time.Millisecond},
	} {
		if got := retryWait(tc.drawn, tc.left); got != tc.want {
			t.Errorf("retryWait(%s, %s) = %s, want %s", tc.drawn, tc.left, got, tc.want)
		}
	}
}
