package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// A ClosingStore is a store as its package opens it: an engine.Store the
// opener closes.
type ClosingStore interface {
	engine.Store
	Close() error
}

// RunReadOnly checks a store opened read-only (store.OpenOptions
// ReadOnly) by openWith, the store's OpenWith, at where (the file's path
// or the database's DSN) that w writes, as the admin listings open it
// beside a running broker: it reads what w wrote, in pages, and every
// write through it fails and changes nothing.
func RunReadOnly[S ClosingStore](t *testing.T, w engine.Store,
	openWith func(context.Context, string, store.OpenOptions) (S, error), where string) {
	ro, err := openReadOnly(t, openWith, where)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		mustInsert(t, w, record(engine.KindInstance, id, "", engine.OpSucceeded))
	}
	got, _ := listPages(t, ro, engine.ListOptions{Kind: engine.KindInstance}, 2, nil)
	if diff := cmp.Diff([]string{"instance/a", "instance/b", "instance/c"}, got); diff != "" {
		t.Errorf("read-only List in pages of 2: -want +got:\n%s", diff)
	}
	r := mustGet(t, ro, engine.KindInstance, "b")
	before := r.Clone()
	r.Op.Description = "written through a read-only store"
	if err := ro.Update(ctx(t), r); err == nil {
		t.Errorf("Update through a read-only store succeeded")
	}
	if err := ro.Insert(ctx(t), record(engine.KindInstance, "d", "", engine.OpSucceeded)); err == nil {
		t.Errorf("Insert through a read-only store succeeded")
	}
	if diff := cmp.Diff(before, mustGet(t, w, engine.KindInstance, "b"), cmpopts.EquateEmpty(), timeOpts); diff != "" {
		t.Errorf("a refused Update changed the record (-before +after):\n%s", diff)
	}
	if _, err := w.Get(ctx(t), engine.KindInstance, "d"); err == nil {
		t.Errorf("a refused Insert stored its record")
	}
	// The writer goes on writing while the read-only store is open.
	mustInsert(t, w, record(engine.KindInstance, "e", "", engine.OpSucceeded))
	mustGet(t, ro, engine.KindInstance, "e")
}

// A Refusal is a place where a read-only open must fail.
type Refusal struct {
	Reason string // why it must fail
	Where  string // the file's path or the database's DSN
	Want   string // a part of the error
}

// RunReadOnlyRefuses checks that a read-only open by openWith, the store's
// OpenWith, fails at each of refusals' places with an error containing its
// Want. Whether a refused open left the place as it was (no file, no
// table, no migration) only the store's own test can see: it checks that
// after.
func RunReadOnlyRefuses[S ClosingStore](t *testing.T,
	openWith func(context.Context, string, store.OpenOptions) (S, error), refusals map[string]Refusal) {
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			_, err := openReadOnly(t, openWith, tc.Where)
			if err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Errorf("%s\nerr = %v, want one containing %q", tc.Reason, err, tc.Want)
			}
		})
	}
}

// openReadOnly opens the store at where read-only and closes it when t
// ends.
func openReadOnly[S ClosingStore](t *testing.T,
	openWith func(context.Context, string, store.OpenOptions) (S, error), where string) (S, error) {
	t.Helper()
	s, err := openWith(t.Context(), where, store.OpenOptions{ReadOnly: true})
	if err == nil {
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	return s, err
}
