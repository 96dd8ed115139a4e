package storetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// RunReadOnly checks ro, a store opened read-only (store.OpenOptions
// ReadOnly) on the database w writes, as the admin listings open it
// beside a running broker: it reads what w wrote, in pages, and every
// write through it fails and changes nothing.
func RunReadOnly(t *testing.T, w, ro engine.Store) {
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
