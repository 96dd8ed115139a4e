package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// frozenGuard is how long the tests wait for a call on a frozen server
// before they thaw it and fail: not a bound the store is held to (that is
// callTimeout), only a stop for a call that would otherwise hang for as
// long as the server stays frozen.
const frozenGuard = 30 * time.Second

// whileFrozen runs call and returns its error, failing the test if the
// call does not return while pg stays frozen.
func whileFrozen(t *testing.T, pg *harness.Postgres, name string, call func(context.Context) error) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	// No deadline from the caller: a request's context has none of its own.
	go func() { done <- call(context.Background()) }()
	select {
	case err := <-done:
		t.Logf("%s on a frozen server returned after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
		return err
	case <-time.After(frozenGuard):
		pg.Thaw()
		err := <-done
		t.Fatalf("%s on a frozen server had not returned after %v (it returned %v once the server was thawed)", name, frozenGuard, err)
		return nil
	}
}

// TestFrozenServer stops every process of a real PostgreSQL server with
// SIGSTOP under a store whose pool holds open connections: the kernel
// keeps them open and acknowledges what is sent, and nothing answers, as
// when the server hangs or the network is cut without a RST. Every call,
// on a pooled connection or a new one, fails while the server is still
// frozen with an error the engine answers 503 for; once the server is
// thawed the store works again, and the writes sent while it was frozen,
// retried as the engine retries them, are neither lost nor applied twice.
func TestFrozenServer(t *testing.T) {
	pg := harness.NewPostgres(t)
	s := open(t, pg.DSN)
	ctx := t.Context()
	stored := record("binding-1")
	if err := s.Insert(ctx, stored); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	// Open several connections at once, as a busy broker has.
	var wg sync.WaitGroup
	for range s.pool.Config().MaxConns {
		wg.Go(func() {
			if _, err := s.Get(ctx, stored.Kind, stored.ID); err != nil {
				t.Errorf("Get: %v", err)
			}
		})
	}
	wg.Wait()

	pg.Freeze()
	added := record("binding-2")
	updated := stored.Clone()
	updated.Phase = engine.PhaseReady
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, stored.Kind, stored.ID); return err }},
		{"Insert", func(ctx context.Context) error { return s.Insert(ctx, added.Clone()) }},
		{"Update", func(ctx context.Context) error { return s.Update(ctx, updated.Clone()) }},
		{"List", func(ctx context.Context) error { _, err := s.List(ctx, engine.ListOptions{}); return err }},
		// By now the pool has closed the connections it found dead, and
		// those left have been idle for seconds: pinged, then dialed anew.
		{"Get again", func(ctx context.Context) error { _, err := s.Get(ctx, stored.Kind, stored.ID); return err }},
	}
	for _, c := range calls {
		if err := whileFrozen(t, pg, c.name, c.call); !isStoreFailure(err) {
			t.Errorf("%s on a frozen server: got %v, want a store failure (not a sentinel, not a context error)", c.name, err)
		} else if !errors.Is(err, errNoAnswer) {
			t.Errorf("%s on a frozen server: got %v, want it to say the server did not answer", c.name, err)
		}
	}
	pg.Thaw()

	// The writes sent while the server was frozen may have been applied
	// when it woke. The engine retries them: Insert until it succeeds or
	// finds the record, Update until it succeeds or finds it stale.
	retry := func(name string, call func() error, done ...error) {
		t.Helper()
		var err error
		// A connection that died while frozen may fail one call.
		for range int(s.pool.Config().MaxConns) + 1 {
			if err = call(); err == nil {
				return
			}
			for _, d := range done {
				if errors.Is(err, d) {
					return
				}
			}
		}
		t.Fatalf("%s after the server was thawed: %v", name, err)
	}
	retry("Insert", func() error { return s.Insert(ctx, added.Clone()) }, engine.ErrExists)
	retry("Update", func() error { return s.Update(ctx, updated.Clone()) }, engine.ErrStale)
	var recs []*engine.Record
	retry("List", func() (err error) { recs, err = s.List(ctx, engine.ListOptions{}); return err })
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if diff := cmp.Diff([]string{"binding-1", "binding-2"}, got); diff != "" {
		t.Errorf("records after the thaw (-want +got):\n%s", diff)
	}
	if len(recs) == 2 && (recs[0].Version != 2 || recs[0].Phase != engine.PhaseReady) {
		t.Errorf("binding-1 after its update was retried: version %d, phase %s; want version 2 (updated once), phase %s",
			recs[0].Version, recs[0].Phase, engine.PhaseReady)
	}
}
