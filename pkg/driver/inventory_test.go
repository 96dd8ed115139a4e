package driver

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGatherInventory(t *testing.T) {
	pages := []Inventory{
		{Buckets: []OwnedBucket{{Name: "b1", Owner: "o"}, {Name: "b2", Owner: "o"}}},
		{Buckets: []OwnedBucket{{Name: "b3", Owner: "o"}}},
		{Users: []OwnedUser{{Name: "u1", Owner: "o", KeyIDs: []string{"k"}}}},
	}
	var gotPrefix string
	paged := func(_ context.Context, namePrefix string, page func(Inventory) error) error {
		gotPrefix = namePrefix
		for _, p := range pages {
			if err := page(p); err != nil {
				return err
			}
		}
		return nil
	}
	got, err := GatherInventory(t.Context(), "bb", paged)
	if err != nil {
		t.Fatal(err)
	}
	want := Inventory{
		Buckets: []OwnedBucket{{Name: "b1", Owner: "o"}, {Name: "b2", Owner: "o"}, {Name: "b3", Owner: "o"}},
		Users:   []OwnedUser{{Name: "u1", Owner: "o", KeyIDs: []string{"k"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("every page gathered, in order: -want +got:\n%s", diff)
	}
	if gotPrefix != "bb" {
		t.Errorf("pages called with prefix %q, want %q", gotPrefix, "bb")
	}

	failed := errors.New("list users: refused")
	got, err = GatherInventory(t.Context(), "", func(_ context.Context, _ string, page func(Inventory) error) error {
		if err := page(pages[0]); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) || !cmp.Equal(got, Inventory{}) {
		t.Errorf("a listing that fails after a page = %+v, %v; want nothing and %v", got, err, failed)
	}
}
