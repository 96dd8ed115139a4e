package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/jsonnest"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// deepObject is a JSON object nested depth levels deep.
func deepObject(depth int) json.RawMessage {
	return json.RawMessage(strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1))
}

func testRefusesUnreadable(t *testing.T, s engine.Store) {
	for name, change := range map[string]func(r *engine.Record){
		// Parameters open at level 3 of a record: this record nests
		// MaxRecordDepth+1 levels.
		"deep parameters": func(r *engine.Record) { r.Request.Parameters = deepObject(store.MaxRecordDepth - 1) },
		// Near encoding/json's own limit: written, it could never be read.
		"parameters near json's limit": func(r *engine.Record) { r.Request.Parameters = deepObject(9999) },
		"deep update target":           func(r *engine.Record) { r.Op.Target = &engine.Request{Context: deepObject(9998)} },
		"too large": func(r *engine.Record) {
			r.Request.Context = json.RawMessage(`{"a":"` + strings.Repeat("x", store.MaxRecordBytes) + `"}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad := record(engine.KindInstance, "bad-"+strings.ReplaceAll(name, " ", "-"), "", engine.OpInProgress)
			change(bad)
			if err := s.Insert(ctx(t), bad); err == nil {
				t.Fatalf("Insert of a record that cannot be read back succeeded")
			}
			if _, err := s.Get(ctx(t), bad.Kind, bad.ID); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("Get after the refused Insert: %v, want ErrNotFound", err)
			}

			good := record(engine.KindInstance, "good-"+strings.ReplaceAll(name, " ", "-"), "", engine.OpInProgress)
			mustInsert(t, s, good)
			want := mustGet(t, s, good.Kind, good.ID)
			changed := want.Clone()
			change(changed)
			if err := s.Update(ctx(t), changed); err == nil {
				t.Fatalf("Update to a record that cannot be read back succeeded")
			}
			if diff := cmp.Diff(want, mustGet(t, s, good.Kind, good.ID), timeOpts); diff != "" {
				t.Errorf("the refused Update changed the record (-before +after):\n%s", diff)
			}
		})
	}

	// The deepest the engine ever writes: free-form values at their limit
	// in the request and in an update's target.
	ok := record(engine.KindInstance, "deepest-allowed", "", engine.OpInProgress)
	ok.Request.Parameters = deepObject(engine.MaxFreeFormDepth)
	ok.Request.Context = deepObject(engine.MaxFreeFormDepth)
	ok.Op.Target = &engine.Request{Parameters: deepObject(engine.MaxFreeFormDepth), Context: deepObject(engine.MaxFreeFormDepth)}
	mustInsert(t, s, ok)
	mustGet(t, s, ok.Kind, ok.ID)
}

// Planter writes a record's raw JSON straight into a store's database,
// past the store's checks, as a write outside bucketbroker (or damage)
// could.
type Planter func(t *testing.T, raw store.Raw, opState engine.OpState)

// RunUnreadable checks how a store lives with records it cannot decode:
// List skips them and reports them (Unreadable), so that start-up, the
// sweep and other records' operations go on; Get fails for that record
// only; FindUnreadable lists them and Repair makes them readable.
func RunUnreadable(t *testing.T, newStore func(t *testing.T) (store.RawStore, Planter)) {
	t.Run("ListSkipsAndReports", func(t *testing.T) { testUnreadableListed(t, newStore) })
	t.Run("RepairAnyField", func(t *testing.T) { testRepairAnyField(t, newStore) })
}

// testUnreadableListed plants a record nested too deep to decode among
// readable ones: List skips and reports it, Get fails for it alone,
// FindUnreadable finds it and Repair makes it readable.
func testUnreadableListed(t *testing.T, newStore func(t *testing.T) (store.RawStore, Planter)) {
	s, plant := newStore(t)
	rep, ok := s.(engine.UnreadableReporter)
	if !ok {
		t.Fatalf("%T does not implement engine.UnreadableReporter", s)
	}
	mustInsert(t, s, record(engine.KindInstance, "i1", "", engine.OpInProgress))
	mustInsert(t, s, record(engine.KindBinding, "b1", "i1", engine.OpInProgress))
	mustInsert(t, s, record(engine.KindBinding, "b3", "i1", engine.OpSucceeded))

	// A binding of i1 whose parameters nest as deep as encoding/json
	// allows: the record around them is deeper still.
	bad := record(engine.KindBinding, "b2", "i1", engine.OpInProgress)
	bad.Version = 4
	bad.Request.Parameters = json.RawMessage(`{}`)
	data, err := store.Encode(bad)
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Replace(string(data), `"parameters":{}`, `"parameters":`+string(deepObject(9999)), 1)
	plant(t, store.Raw{Kind: bad.Kind, ID: bad.ID, InstanceID: "i1", Version: 4, Data: []byte(deep)}, engine.OpInProgress)

	for _, opts := range []engine.ListOptions{{Unfinished: true}, {InstanceID: "i1"}, {Kind: engine.KindBinding}, {}} {
		got, err := s.List(ctx(t), opts)
		if err != nil {
			t.Fatalf("List(%+v) with an unreadable record: %v; want the readable ones", opts, err)
		}
		for _, r := range got {
			if r.ID == "b2" {
				t.Errorf("List(%+v) returned the unreadable record", opts)
			}
		}
	}
	checkUnreadablePaged(t, s)
	got := rep.Unreadable()
	if len(got) != 1 || got[0].Kind != engine.KindBinding || got[0].ID != "b2" || got[0].InstanceID != "i1" || got[0].Version != 4 || got[0].Error == "" {
		t.Fatalf("Unreadable() = %+v, want binding b2 of i1 at version 4 with its error", got)
	}
	if _, err := s.Get(ctx(t), engine.KindBinding, "b2"); err == nil || errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get of the unreadable record: %v, want a decode error", err)
	}
	mustGet(t, s, engine.KindBinding, "b1") // the others read as ever

	found, err := store.FindUnreadable(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].ID != "b2" || found[0].InstanceID != "i1" {
		t.Fatalf("FindUnreadable = %+v, want binding b2 of i1", found)
	}

	fixed, err := store.Repair(ctx(t), s, engine.KindBinding, "b2")
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if fixed.Pruned != 1 || fixed.Version != 5 {
		t.Errorf("Repair = %+v, want 1 value pruned and version 5", fixed)
	}
	r := mustGet(t, s, engine.KindBinding, "b2")
	if r.Op.ID != bad.Op.ID || r.InstanceID != "i1" || r.Version != 5 {
		t.Errorf("repaired record = %+v, want b2's operation, instance and version 5", r)
	}
	if d := jsonnest.Depth(r.Request.Parameters); d > store.MaxRecordDepth {
		t.Errorf("repaired parameters nest %d levels", d)
	}
	if _, err := s.List(ctx(t), engine.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rep.Unreadable(); len(got) != 0 {
		t.Errorf("Unreadable() after the repair and a List = %+v, want none", got)
	}
	if _, err := store.Repair(ctx(t), s, engine.KindBinding, "b2"); !errors.Is(err, store.ErrReadable) {
		t.Errorf("Repair of a readable record: %v, want ErrReadable", err)
	}
	if found, err := store.FindUnreadable(ctx(t), s); err != nil || len(found) != 0 {
		t.Errorf("FindUnreadable after the repair = %+v, %v; want none", found, err)
	}
}

// testRepairAnyField: Repair prunes a value too deep in a field the record
// type does not know, and refuses an id that does not exist.
func testRepairAnyField(t *testing.T, newStore func(t *testing.T) (store.RawStore, Planter)) {
	s, plant := newStore(t)
	bad := record(engine.KindInstance, "i9", "", engine.OpSucceeded)
	data, err := store.Encode(bad)
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Replace(string(data), `"fingerprint"`, `"x":`+string(deepObject(10001))+`,"fingerprint"`, 1)
	plant(t, store.Raw{Kind: bad.Kind, ID: bad.ID, Version: 1, Data: []byte(deep)}, engine.OpSucceeded)
	if _, err := store.Repair(ctx(t), s, engine.KindInstance, "i9"); err != nil {
		t.Fatalf("Repair of an unknown field too deep: %v", err)
	}
	if _, err := store.Repair(ctx(t), s, engine.KindInstance, "nope"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Repair of an unknown id: %v, want ErrNotFound", err)
	}
}

// checkUnreadablePaged: paged, an unreadable record (binding b2, among
// b1, b3 and instance i1) does not count against a page's limit: a page
// stops short only at the end of the listing, so that a page whose rows
// are all unreadable does not end it early.
func checkUnreadablePaged(t *testing.T, s engine.Store) {
	t.Helper()
	for _, limit := range []int{1, 2, 3} {
		for _, opts := range []engine.ListOptions{{Kind: engine.KindBinding}, {}} {
			got, _ := listPages(t, s, opts, limit, nil)
			want := []string{"binding/b1", "binding/b3"}
			if opts.Kind == "" {
				want = append(want, "instance/i1")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("List(%+v) in pages of %d with an unreadable record (-want +got):\n%s", opts, limit, diff)
			}
		}
	}
}
