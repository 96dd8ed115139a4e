package storetest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// RunTwoStores checks two Stores on one database, as two processes (or
// replicas) have them: the primary key and the version column must decide
// between them as they decide between the goroutines of one Store.
func RunTwoStores(t *testing.T, a, b engine.Store) {
	stores := []engine.Store{a, b}
	noPrepare := func(int) error { return nil }

	t.Run("Insert", func(t *testing.T) {
		const n = 200
		errs := race(n, noPrepare, func(i int) error {
			return stores[i%2].Insert(t.Context(), benchRecord("same"))
		})
		if ok, exists := tally(t, errs, engine.ErrExists); ok != 1 || exists != n-1 {
			t.Errorf("%d Inserts through two stores: %d succeeded, %d ErrExists; want 1 and %d", n, ok, exists, n-1)
		}
		ra, err := stores[0].Get(t.Context(), engine.KindBinding, "same")
		if err != nil {
			t.Fatal(err)
		}
		rb, err := stores[1].Get(t.Context(), engine.KindBinding, "same")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ra, rb, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("the two stores disagree (-first +second):\n%s", diff)
		}
	})

	t.Run("Update", func(t *testing.T) {
		if err := stores[0].Insert(t.Context(), benchRecord("updated")); err != nil {
			t.Fatal(err)
		}
		const n = 100
		recs := make([]*engine.Record, n)
		errs := race(n, func(i int) (err error) {
			recs[i], err = stores[i%2].Get(t.Context(), engine.KindBinding, "updated")
			if err == nil {
				recs[i].Op.Description = fmt.Sprintf("written by %d", i)
			}
			return err
		}, func(i int) error {
			return stores[i%2].Update(t.Context(), recs[i])
		})
		if ok, stale := tally(t, errs, engine.ErrStale); ok != 1 || stale != n-1 {
			t.Errorf("%d Updates through two stores: %d succeeded, %d ErrStale; want 1 and %d", n, ok, stale, n-1)
		}
		got, err := stores[1].Get(t.Context(), engine.KindBinding, "updated")
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 2 {
			t.Errorf("Version after concurrent Updates = %d, want 2", got.Version)
		}
	})
}
