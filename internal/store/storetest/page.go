package storetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// listPages pages through List with opts and limit, calling between
// after each page but the last, and returns the keys listed and how many
// pages it took.
func listPages(t *testing.T, s engine.Store, opts engine.ListOptions, limit int, between func(page int)) (got []string, pages int) {
	t.Helper()
	opts.Limit = limit
	for {
		page, err := s.List(ctx(t), opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", opts, err)
		}
		pages++
		if len(page) > limit {
			t.Fatalf("List(%+v) returned %d records, more than its limit", opts, len(page))
		}
		got = append(got, keys(page)...)
		if len(page) < limit {
			return got, pages
		}
		if pages > 1000 {
			t.Fatalf("List(%+v): still paging after %d pages", opts, pages)
		}
		opts.After = engine.KeyOf(page[len(page)-1])
		if between != nil {
			between(pages)
		}
	}
}

func testListPaged(t *testing.T, s engine.Store) {
	// Out of order again, ids whose byte order differs from a locale's.
	var all []string
	for i, id := range []string{"a", "B", "ä", "a1", "b10", "b2", "c", "Z"} {
		mustInsert(t, s, record(engine.KindInstance, id, "", engine.OpSucceeded))
		mustInsert(t, s, record(engine.KindBinding, "b-"+id, id, []engine.OpState{engine.OpInProgress, engine.OpSucceeded}[i%2]))
		all = append(all, "instance/"+id, "binding/b-"+id)
	}
	slices.Sort(all) // kind, then id, in byte order
	whole, err := s.List(ctx(t), engine.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, keys(whole)); diff != "" {
		t.Fatalf("List without a limit (-want +got):\n%s", diff)
	}

	t.Run("CoverEveryRecordOnce", func(t *testing.T) { pagedCoverEveryRecordOnce(t, s, all) })
	t.Run("WithSelection", func(t *testing.T) { pagedWithSelection(t, s, all) })
	t.Run("AfterAlone", func(t *testing.T) { pagedAfterAlone(t, s, all) })
	t.Run("NegativeLimit", func(t *testing.T) { pagedNegativeLimit(t, s, all) })
	t.Run("WritesBetweenPages", func(t *testing.T) { pagedWritesBetweenPages(t, s, all) })
}

func pagedCoverEveryRecordOnce(t *testing.T, s engine.Store, all []string) {
	for _, limit := range []int{1, 2, 3, 5, 16, 17, 100} {
		got, pages := listPages(t, s, engine.ListOptions{}, limit, nil)
		if diff := cmp.Diff(all, got); diff != "" {
			t.Errorf("pages of %d (-want +got):\n%s", limit, diff)
		}
		if want := len(all)/limit + 1; pages != want {
			t.Errorf("pages of %d: %d pages, want %d", limit, pages, want)
		}
	}
}

func pagedWithSelection(t *testing.T, s engine.Store, all []string) {
	for _, opts := range []engine.ListOptions{{Kind: engine.KindInstance}, {Kind: engine.KindBinding}, {Unfinished: true}, {InstanceID: "b2"}} {
		want, err := s.List(ctx(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 3} {
			got, _ := listPages(t, s, opts, limit, nil)
			if diff := cmp.Diff(keys(want), got); diff != "" {
				t.Errorf("List(%+v) in pages of %d (-whole +paged):\n%s", opts, limit, diff)
			}
		}
	}
}

func pagedAfterAlone(t *testing.T, s engine.Store, all []string) {
	got, err := s.List(ctx(t), engine.ListOptions{After: engine.RecordKey{Kind: engine.KindBinding, ID: "b-c"}})
	if err != nil {
		t.Fatal(err)
	}
	want := all[slices.Index(all, "binding/b-c")+1:]
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Errorf("List after binding/b-c without a limit (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if diff := cmp.Diff(mustGet(t, s, r.Kind, r.ID), r, timeOpts); diff != "" {
			t.Errorf("paged record %s/%s differs from Get (-get +list):\n%s", r.Kind, r.ID, diff)
		}
	}
}

func pagedNegativeLimit(t *testing.T, s engine.Store, all []string) {
	if got, err := s.List(ctx(t), engine.ListOptions{Limit: -1}); err == nil {
		t.Errorf("List with Limit -1 = %d records, want an error", len(got))
	}
}

func pagedWritesBetweenPages(t *testing.T, s engine.Store, all []string) {
	// After the second page of 3 (the cursor at all[5]): a record
	// updated behind the cursor and one ahead of it, a record inserted
	// behind and one ahead. Every record that existed throughout is
	// listed once, in order; the one inserted ahead is listed too, the
	// one behind is not.
	seen := 0
	got, _ := listPages(t, s, engine.ListOptions{}, 3, func(page int) {
		if page != 2 {
			return
		}
		seen++
		for _, key := range []string{all[1], all[9]} { // behind, ahead
			kind, id, _ := strings.Cut(key, "/")
			r := mustGet(t, s, engine.Kind(kind), id)
			r.Phase = engine.PhaseReady
			if err := s.Update(ctx(t), r); err != nil {
				t.Fatalf("Update %s: %v", key, err)
			}
		}
		mustInsert(t, s, record(engine.KindBinding, "b-0", "", engine.OpSucceeded)) // behind: "b-0" < "b-B"
		mustInsert(t, s, record(engine.KindInstance, "zz", "", engine.OpSucceeded)) // ahead
	})
	if seen != 1 {
		t.Fatalf("wrote between pages %d times, want once", seen)
	}
	want := append(slices.Clone(all), "instance/zz")
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages of 3 with writes between (-want +got):\n%s", diff)
	}
}
