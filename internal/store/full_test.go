package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

func TestWritesCheck(t *testing.T) {
	full := Full(errors.New("database or disk is full (13)"))
	other := errors.New("database is locked")
	tests := map[string]struct {
		reason string
		// notes are the outcomes of the writes before Check.
		notes []error
		// probedAgo is how long ago the last probe started (zero: never).
		probedAgo time.Duration
		probe     error
		// want: Check's error (nil for none), and whether it probed.
		wantErr    error
		wantProbed bool
		// after: whether a failure is still remembered after Check.
		wantFailedAfter bool
	}{
		"no writes": {
			reason: "A store that has not failed a write is writable, and Check writes nothing.",
		},
		"writes succeeded": {
			reason: "Successful writes leave nothing to report.",
			notes:  []error{nil, nil},
		},
		"other failure": {
			reason: "A failure that is not for want of space (a lock, a duplicate, a caller who gave up) says nothing about space.",
			notes:  []error{other},
		},
		"full, probe fails": {
			reason:          "After a write failed for want of space, Check probes, and reports the probe's failure.",
			notes:           []error{full},
			probe:           full,
			wantErr:         engine.ErrFull,
			wantProbed:      true,
			wantFailedAfter: true,
		},
		"full, probe succeeds": {
			reason:     "A probe that writes clears the failure: once space is freed, the store is ready again without a request.",
			notes:      []error{full},
			wantProbed: true,
		},
		"full, probed just now": {
			reason:          "Within ProbeInterval of the last probe, Check answers from what it remembers and writes nothing.",
			notes:           []error{full},
			probedAgo:       ProbeInterval / 10,
			wantErr:         engine.ErrFull,
			wantFailedAfter: true,
		},
		"full, then a write succeeded": {
			reason: "A write that succeeds after the failure clears it.",
			notes:  []error{full, nil},
		},
		"full, then another failure": {
			reason:          "A failure of another kind after a full one does not clear it.",
			notes:           []error{full, other},
			probedAgo:       ProbeInterval / 10,
			wantErr:         engine.ErrFull,
			wantFailedAfter: true,
		},
		"full, probe cannot tell": {
			reason:          "A probe that fails for another reason (a deadline) keeps the failure and reports both.",
			notes:           []error{full},
			probe:           context.DeadlineExceeded,
			wantErr:         context.DeadlineExceeded,
			wantProbed:      true,
			wantFailedAfter: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var w Writes
			for _, err := range tc.notes {
				w.Note(err)
			}
			if tc.probedAgo > 0 {
				w.probed = time.Now().Add(-tc.probedAgo)
			}
			probed := false
			err := w.Check(t.Context(), func(context.Context) error { probed = true; return tc.probe })
			if (err == nil) != (tc.wantErr == nil) || (err != nil && !errors.Is(err, tc.wantErr)) {
				t.Errorf("Check = %v, want %v\n%s", err, tc.wantErr, tc.reason)
			}
			got := map[string]bool{"probed": probed, "failed after": w.failed != nil}
			want := map[string]bool{"probed": tc.wantProbed, "failed after": tc.wantFailedAfter}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\n%s", diff, tc.reason)
			}
		})
	}
}

func TestFullReadsAsItsCause(t *testing.T) {
	cause := errors.New("database or disk is full (13)")
	err := Full(cause)
	if err.Error() != cause.Error() {
		t.Errorf("Full(err).Error() = %q, want the cause's %q", err, cause)
	}
	if !errors.Is(err, engine.ErrFull) || !errors.Is(err, cause) {
		t.Errorf("Full(err) is not both engine.ErrFull and its cause: %v", err)
	}
}

func TestCheckNew(t *testing.T) {
	said := errors.New("marker x says the database held records")
	earlier := errors.New("the data dir holds encryption.key")
	tests := map[string]struct {
		reason string
		opts   OpenOptions
		own    func() error
		want   error
	}{
		"first start": {
			reason: "Nothing says that records were kept: the store is created.",
			opts:   OpenOptions{Earlier: func() error { return nil }},
			own:    func() error { return nil },
		},
		"nothing asked": {
			reason: "No evidence to ask: the store is created.",
		},
		"own evidence": {
			reason: "The store's own marker refuses, wrapped in ErrLost.",
			own:    func() error { return said },
			want:   said,
		},
		"data dir": {
			reason: "The data dir's state refuses, wrapped in ErrLost.",
			opts:   OpenOptions{Earlier: func() error { return earlier }},
			want:   earlier,
		},
		"start over": {
			reason: "Starting over asks nothing.",
			opts:   OpenOptions{StartOver: true, Earlier: func() error { return earlier }},
			own:    func() error { return said },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckNew(tc.opts, tc.own)
			if tc.want == nil {
				if err != nil {
					t.Errorf("CheckNew = %v, want nil\n%s", err, tc.reason)
				}
				return
			}
			if !errors.Is(err, ErrLost) || !errors.Is(err, tc.want) {
				t.Errorf("CheckNew = %v, want ErrLost and %v\n%s", err, tc.want, tc.reason)
			}
		})
	}
}
