package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Concurrency of the race tests.
const (
	inserters = 200
	updaters  = 100
)

// timeOpts compares times to the microsecond, the finest precision every
// store must keep; a store that keeps less (milliseconds, seconds) fails.
var timeOpts = cmpopts.EquateApproxTime(time.Microsecond)

// Run runs the conformance suite. newStore must return a new, empty store
// for each test, and clean it up with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) engine.Store) {
	t.Helper()
	tests := map[string]struct {
		reason string
		test   func(t *testing.T, s engine.Store)
	}{
		"InsertGetRoundTrip": {
			reason: "Every field of a record, down to raw JSON bytes, secret bytes and times to the microsecond, must come back as written.",
			test:   testInsertGetRoundTrip,
		},
		"InsertCopiesRecord": {
			reason: "A store must not keep the caller's record: changing it after Insert must not change what is stored.",
			test:   testInsertCopiesRecord,
		},
		"InsertDuplicate": {
			reason: "A second Insert of the same kind and id must return ErrExists and leave the first record as it was.",
			test:   testInsertDuplicate,
		},
		"GetUnknown": {
			reason: "Get of an id never inserted must return ErrNotFound.",
			test:   testGetUnknown,
		},
		"UpdateIncrementsVersion": {
			reason: "A successful Update must store the new content, increment Version, stamp UpdatedAt and keep CreatedAt.",
			test:   testUpdateIncrementsVersion,
		},
		"UpdateStale": {
			reason: "Update with a version other than the stored one must return ErrStale and change nothing.",
			test:   testUpdateStale,
		},
		"UpdateUnknown": {
			reason: "Update of an id never inserted must return ErrNotFound, not ErrStale.",
			test:   testUpdateUnknown,
		},
		"List": {
			reason: "List must select by kind, instance and unfinished operation, and order by kind then id (byte order).",
			test:   testList,
		},
		"ListPaged": {
			reason: "List with Limit and After must page through the records in (kind, id) order, each record once, whatever is inserted or updated between pages; Limit 0 lists everything; a negative Limit is an error.",
			test:   testListPaged,
		},
		"ListByName": {
			reason: "List with ByName must list one kind by resource name (an instance's bucket, a binding's user), then id, in byte order, as Insert and Update wrote them, in pages after a (name, id) cursor; without a kind it is an error.",
			test:   testListByName,
		},
		"ListFollowsUpdates": {
			reason: "List must select on the state written by the latest Update, not by Insert.",
			test:   testListFollowsUpdates,
		},
		"KindsAreNamespaces": {
			reason: "An instance and a binding with the same id are two records.",
			test:   testKindsAreNamespaces,
		},
		"ConcurrentInsert": {
			reason: "Of many concurrent Inserts of one id exactly one must win; the others get ErrExists, never another error.",
			test:   testConcurrentInsert,
		},
		"ConcurrentUpdate": {
			reason: "Of many concurrent Updates from the same read exactly one must win; the others get ErrStale.",
			test:   testConcurrentUpdate,
		},
		"RefusesUnreadable": {
			reason: "A record nested deeper than it could be read back, or too large, must be refused by Insert and Update, and nothing written.",
			test:   testRefusesUnreadable,
		},
		"CanceledContext": {
			reason: "Every call must honor its context: a canceled call returns the context's error and writes nothing.",
			test:   testCanceledContext,
		},
	}
	names := make([]string, 0, len(tests))
	for name := range tests {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			t.Log(tc.reason)
			tc.test(t, newStore(t))
		})
	}
}

// ctx returns a context for one test's store calls, with a deadline.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// fullRecord returns a binding with every field set to a value that is not
// its zero value, in a time zone other than UTC.
func fullRecord(kind engine.Kind, id string) *engine.Record {
	zone := time.FixedZone("UTC+5:30", 5*3600+30*60)
	started := time.Date(2026, 3, 4, 5, 6, 7, 123456789, zone)
	return &engine.Record{
		Kind:        kind,
		ID:          id,
		InstanceID:  "instance-1",
		Fingerprint: "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		Request: engine.Request{
			ServiceID: "service-1",
			PlanID:    "plan-small",
			// Canonical JSON with characters encoding/json escapes by
			// default (<, >, &) and non-ASCII text: it must come back
			// byte for byte, or fingerprints computed from it change.
			Parameters:       json.RawMessage(`{"a":"<b>&</b>","n":[1,2.5,-3e-7],"z":"grüße 東京"}`),
			OrganizationGUID: "org-1",
			SpaceGUID:        "space-1",
			Context:          json.RawMessage(`{"platform":"cloudfoundry","space_name":"dev"}`),
			AppGUID:          "app-1",
			BindResource:     json.RawMessage(`{"app_guid":"app-1"}`),
		},
		Phase: engine.PhaseUpdating,
		Op: engine.Operation{
			ID:          "op-1",
			Type:        engine.OpUpdate,
			State:       engine.OpInProgress,
			Description: "changing plan to plan-large",
			Async:       true,
			Identity:    "cloudfoundry eyJ1c2VyX2lkIjoiNjgzZWE3NDgifQ==",
			StartedAt:   started,
			Deadline:    started.Add(time.Hour),
			EndedAt:     started.Add(90 * time.Second),
			Target: &engine.Request{
				ServiceID:  "service-1",
				PlanID:     "plan-large",
				Parameters: json.RawMessage(`{"quota":"10Gi"}`),
			},
		},
		Backend: "bucket",
		Bucket: &engine.BucketState{
			Bucket:          "bb-2f1c0a9e",
			Owner:           "bucketbroker/binding/" + id,
			BucketAttempted: true,
			UserName:        "bb-u-7d3e",
			Access:          "read-write",
			AccessKeyID:     "AKIAEXAMPLE0001",
		},
		Upstream:     &engine.UpstreamState{Attempted: true, Op: engine.UpstreamOp{OpID: "op-7", Operation: "task-9"}},
		DashboardURL: "https://dashboard.example/" + id,
		SealedSecret: []byte{0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, '"', '\\'},
		CreatedAt:    started.Add(-time.Minute),
	}
}

// record returns a small record for the list and race tests.
func record(kind engine.Kind, id, instanceID string, state engine.OpState) *engine.Record {
	return &engine.Record{
		Kind:        kind,
		ID:          id,
		InstanceID:  instanceID,
		Fingerprint: "fp-" + id,
		Phase:       engine.PhaseProvisioning,
		Op: engine.Operation{
			ID:        "op-" + id,
			Type:      engine.OpProvision,
			State:     state,
			StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		},
	}
}

func mustInsert(t *testing.T, s engine.Store, r *engine.Record) {
	t.Helper()
	if err := s.Insert(ctx(t), r); err != nil {
		t.Fatalf("Insert(%s/%s): %v", r.Kind, r.ID, err)
	}
}

func mustGet(t *testing.T, s engine.Store, kind engine.Kind, id string) *engine.Record {
	t.Helper()
	r, err := s.Get(ctx(t), kind, id)
	if err != nil {
		t.Fatalf("Get(%s/%s): %v", kind, id, err)
	}
	return r
}

// checkUTC fails the test for every time in r that is not in UTC.
func checkUTC(t *testing.T, r *engine.Record) {
	t.Helper()
	for name, v := range map[string]time.Time{
		"CreatedAt":    r.CreatedAt,
		"UpdatedAt":    r.UpdatedAt,
		"Op.StartedAt": r.Op.StartedAt,
		"Op.Deadline":  r.Op.Deadline,
		"Op.EndedAt":   r.Op.EndedAt,
	} {
		if v.Location() != time.UTC {
			t.Errorf("%s/%s: %s is in %v, want UTC", r.Kind, r.ID, name, v.Location())
		}
	}
}

func testInsertGetRoundTrip(t *testing.T, s engine.Store) {
	in := fullRecord(engine.KindBinding, "binding-1")
	want := in.Clone()
	before := time.Now()
	if err := s.Insert(ctx(t), in); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	after := time.Now()

	if in.Version != 1 {
		t.Errorf("Insert set Version = %d, want 1", in.Version)
	}
	if in.UpdatedAt.Before(before.Add(-time.Second)) || in.UpdatedAt.After(after.Add(time.Second)) {
		t.Errorf("Insert set UpdatedAt = %v, want between %v and %v", in.UpdatedAt, before, after)
	}
	// What the store sets is the store's; everything else is the caller's.
	want.Version = 1
	want.UpdatedAt = in.UpdatedAt
	if diff := cmp.Diff(want, in, timeOpts); diff != "" {
		t.Errorf("Insert changed the caller's record beyond Version and UpdatedAt (-want +got):\n%s", diff)
	}

	got := mustGet(t, s, in.Kind, in.ID)
	if diff := cmp.Diff(want, got, timeOpts); diff != "" {
		t.Errorf("Get after Insert (-want +got):\n%s", diff)
	}
	checkUTC(t, got)

	// A store that stamps its own CreatedAt when the caller set none.
	bare := record(engine.KindInstance, "instance-bare", "", engine.OpInProgress)
	mustInsert(t, s, bare)
	if bare.CreatedAt.IsZero() {
		t.Errorf("Insert left CreatedAt zero on a record without one")
	}
	if diff := cmp.Diff(bare, mustGet(t, s, bare.Kind, bare.ID), timeOpts); diff != "" {
		t.Errorf("Get after Insert of a record without CreatedAt (-want +got):\n%s", diff)
	}
}

func testInsertCopiesRecord(t *testing.T, s engine.Store) {
	in := fullRecord(engine.KindBinding, "binding-1")
	mustInsert(t, s, in)
	// Not in.Clone(): Clone shares the json.RawMessage bytes.
	want := fullRecord(engine.KindBinding, "binding-1")
	want.Version, want.CreatedAt, want.UpdatedAt = in.Version, in.CreatedAt, in.UpdatedAt

	in.SealedSecret[0] = 0x42
	in.Request.Parameters[2] = 'X'
	in.Op.Target.PlanID = "changed"
	in.Phase = engine.PhaseFailed

	got := mustGet(t, s, in.Kind, in.ID)
	if diff := cmp.Diff(want, got, timeOpts); diff != "" {
		t.Errorf("stored record changed with the caller's copy (-want +got):\n%s", diff)
	}
	got.SealedSecret[1] = 0x42
	if diff := cmp.Diff(want, mustGet(t, s, in.Kind, in.ID), timeOpts); diff != "" {
		t.Errorf("stored record changed with a returned copy (-want +got):\n%s", diff)
	}
}

func testInsertDuplicate(t *testing.T, s engine.Store) {
	first := fullRecord(engine.KindInstance, "instance-1")
	mustInsert(t, s, first)

	dup := fullRecord(engine.KindInstance, "instance-1")
	dup.Fingerprint = "sha256:other"
	dup.Phase = engine.PhaseProvisioning
	dup.SealedSecret = []byte("other")
	err := s.Insert(ctx(t), dup)
	if !errors.Is(err, engine.ErrExists) {
		t.Fatalf("second Insert: got error %v, want ErrExists", err)
	}
	if dup.Version != 0 {
		t.Errorf("failed Insert set the caller's Version to %d, want it left at 0", dup.Version)
	}
	if diff := cmp.Diff(first, mustGet(t, s, first.Kind, first.ID), timeOpts); diff != "" {
		t.Errorf("duplicate Insert changed the stored record (-want +got):\n%s", diff)
	}
}

func testGetUnknown(t *testing.T, s engine.Store) {
	mustInsert(t, s, record(engine.KindInstance, "known", "", engine.OpSucceeded))
	for _, id := range []string{"unknown", "Known", "known ", "know"} {
		r, err := s.Get(ctx(t), engine.KindInstance, id)
		if !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Get(instance/%q): got (%v, %v), want ErrNotFound", id, r, err)
		}
	}
}

func testUpdateIncrementsVersion(t *testing.T, s engine.Store) {
	in := fullRecord(engine.KindInstance, "instance-1")
	mustInsert(t, s, in)
	created := in.CreatedAt

	r := mustGet(t, s, in.Kind, in.ID)
	ended := r.Op.StartedAt.Add(time.Minute)
	r.Phase = engine.PhaseReady
	r.Op.State = engine.OpSucceeded
	r.Op.EndedAt = ended
	r.Op.Target = nil
	r.SealedSecret = nil
	before := r.UpdatedAt
	if err := s.Update(ctx(t), r); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if r.Version != 2 {
		t.Errorf("Update set Version = %d, want 2", r.Version)
	}
	if r.UpdatedAt.Before(before) {
		t.Errorf("Update set UpdatedAt = %v, before the previous %v", r.UpdatedAt, before)
	}
	if !r.CreatedAt.Equal(created) {
		t.Errorf("Update changed CreatedAt from %v to %v", created, r.CreatedAt)
	}
	got := mustGet(t, s, in.Kind, in.ID)
	if diff := cmp.Diff(r, got, timeOpts); diff != "" {
		t.Errorf("Get after Update (-want +got):\n%s", diff)
	}
	checkUTC(t, got)

	got.Op.Description = "second write"
	if err := s.Update(ctx(t), got); err != nil {
		t.Fatalf("second Update: %v", err)
	}
	if got.Version != 3 {
		t.Errorf("second Update set Version = %d, want 3", got.Version)
	}
	if diff := cmp.Diff(got, mustGet(t, s, in.Kind, in.ID), timeOpts); diff != "" {
		t.Errorf("Get after second Update (-want +got):\n%s", diff)
	}
}

func testUpdateStale(t *testing.T, s engine.Store) {
	mustInsert(t, s, fullRecord(engine.KindBinding, "binding-1"))
	a := mustGet(t, s, engine.KindBinding, "binding-1")
	b := mustGet(t, s, engine.KindBinding, "binding-1")

	a.Phase = engine.PhaseReady
	if err := s.Update(ctx(t), a); err != nil {
		t.Fatalf("first Update: %v", err)
	}
	want := mustGet(t, s, a.Kind, a.ID)

	tests := map[string]struct {
		reason  string
		version int64
	}{
		"Behind": {
			reason:  "The caller read version 1; version 2 has been written since.",
			version: 1,
		},
		"Ahead": {
			reason:  "A version the store never wrote must not match either.",
			version: 7,
		},
		"Zero": {
			reason:  "A record that was never read from the store has version 0.",
			version: 0,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := b.Clone()
			r.Version = tc.version
			r.Phase = engine.PhaseFailed
			r.Bucket.AccessKeyID = "AKIASTALE"
			stale := r.Clone()
			err := s.Update(ctx(t), r)
			if !errors.Is(err, engine.ErrStale) {
				t.Fatalf("%s\nUpdate at version %d: got error %v, want ErrStale", tc.reason, tc.version, err)
			}
			if diff := cmp.Diff(stale, r, timeOpts); diff != "" {
				t.Errorf("%s\nfailed Update changed the caller's record (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(want, mustGet(t, s, a.Kind, a.ID), timeOpts); diff != "" {
				t.Errorf("%s\nfailed Update changed the stored record (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func testUpdateUnknown(t *testing.T, s engine.Store) {
	mustInsert(t, s, record(engine.KindInstance, "known", "", engine.OpSucceeded))
	r := record(engine.KindInstance, "unknown", "", engine.OpSucceeded)
	r.Version = 1
	if err := s.Update(ctx(t), r); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Update(instance/unknown): got error %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx(t), engine.KindInstance, "unknown"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after failed Update: got error %v, want ErrNotFound (Update must not create)", err)
	}
}

// keys returns "kind/id" of each record, in order.
func keys(rs []*engine.Record) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, string(r.Kind)+"/"+r.ID)
	}
	return out
}

func testList(t *testing.T, s engine.Store) {
	// Inserted out of order. "B" < "a" < "ä" in byte order; a store that
	// sorts with a locale collation (PostgreSQL's default) gets it wrong.
	for _, r := range []*engine.Record{
		record(engine.KindInstance, "a", "", engine.OpSucceeded),
		record(engine.KindBinding, "b3", "B", engine.OpInProgress),
		record(engine.KindInstance, "ä", "", engine.OpFailed),
		record(engine.KindBinding, "b2", "a", engine.OpSucceeded),
		record(engine.KindInstance, "B", "", engine.OpInProgress),
		record(engine.KindBinding, "b1", "a", engine.OpInProgress),
		record(engine.KindBinding, "b10", "a", engine.OpFailed),
	} {
		mustInsert(t, s, r)
	}

	tests := map[string]struct {
		reason string
		opts   engine.ListOptions
		want   []string
	}{
		"All": {
			reason: "Zero options select every record, by kind then id.",
			want:   []string{"binding/b1", "binding/b10", "binding/b2", "binding/b3", "instance/B", "instance/a", "instance/ä"},
		},
		"Instances": {
			reason: "Kind selects one kind.",
			opts:   engine.ListOptions{Kind: engine.KindInstance},
			want:   []string{"instance/B", "instance/a", "instance/ä"},
		},
		"Bindings": {
			reason: "Kind selects one kind.",
			opts:   engine.ListOptions{Kind: engine.KindBinding},
			want:   []string{"binding/b1", "binding/b10", "binding/b2", "binding/b3"},
		},
		"BindingsOfInstance": {
			reason: "InstanceID selects the bindings of one instance, whatever their state.",
			opts:   engine.ListOptions{InstanceID: "a"},
			want:   []string{"binding/b1", "binding/b10", "binding/b2"},
		},
		"BindingsOfInstanceByKind": {
			reason: "Kind and InstanceID combine.",
			opts:   engine.ListOptions{Kind: engine.KindBinding, InstanceID: "B"},
			want:   []string{"binding/b3"},
		},
		"Unfinished": {
			reason: "Unfinished selects operations in progress, not failed or succeeded ones.",
			opts:   engine.ListOptions{Unfinished: true},
			want:   []string{"binding/b1", "binding/b3", "instance/B"},
		},
		"UnfinishedInstances": {
			reason: "Unfinished and Kind combine.",
			opts:   engine.ListOptions{Kind: engine.KindInstance, Unfinished: true},
			want:   []string{"instance/B"},
		},
		"UnfinishedOfInstance": {
			reason: "Unfinished and InstanceID combine.",
			opts:   engine.ListOptions{InstanceID: "a", Unfinished: true},
			want:   []string{"binding/b1"},
		},
		"NoMatch": {
			reason: "An instance without bindings lists nothing.",
			opts:   engine.ListOptions{InstanceID: "ä"},
			want:   []string{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := s.List(ctx(t), tc.opts)
			if err != nil {
				t.Fatalf("List(%+v): %v", tc.opts, err)
			}
			if diff := cmp.Diff(tc.want, keys(got)); diff != "" {
				t.Errorf("%s\nList(%+v) (-want +got):\n%s", tc.reason, tc.opts, diff)
			}
			// List returns whole records, the same Get returns.
			for _, r := range got {
				if diff := cmp.Diff(mustGet(t, s, r.Kind, r.ID), r, timeOpts); diff != "" {
					t.Errorf("List(%+v) record %s/%s differs from Get (-get +list):\n%s", tc.opts, r.Kind, r.ID, diff)
				}
			}
		})
	}
}

func testListFollowsUpdates(t *testing.T, s engine.Store) {
	mustInsert(t, s, record(engine.KindBinding, "b1", "i1", engine.OpInProgress))
	mustInsert(t, s, record(engine.KindBinding, "b2", "i1", engine.OpSucceeded))

	r := mustGet(t, s, engine.KindBinding, "b1")
	r.Op.State = engine.OpSucceeded
	r.InstanceID = "i2"
	if err := s.Update(ctx(t), r); err != nil {
		t.Fatalf("Update b1: %v", err)
	}
	r = mustGet(t, s, engine.KindBinding, "b2")
	r.Op = engine.Operation{ID: "op-unbind", Type: engine.OpUnbind, State: engine.OpInProgress}
	if err := s.Update(ctx(t), r); err != nil {
		t.Fatalf("Update b2: %v", err)
	}

	for _, tc := range []struct {
		opts engine.ListOptions
		want []string
	}{
		{engine.ListOptions{Unfinished: true}, []string{"binding/b2"}},
		{engine.ListOptions{InstanceID: "i1"}, []string{"binding/b2"}},
		{engine.ListOptions{InstanceID: "i2"}, []string{"binding/b1"}},
	} {
		got, err := s.List(ctx(t), tc.opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", tc.opts, err)
		}
		if diff := cmp.Diff(tc.want, keys(got)); diff != "" {
			t.Errorf("List(%+v) after Updates (-want +got):\n%s", tc.opts, diff)
		}
		for _, r := range got {
			if r.Version != 2 {
				t.Errorf("List(%+v) returned %s/%s at version %d, want 2", tc.opts, r.Kind, r.ID, r.Version)
			}
		}
	}
}

func testKindsAreNamespaces(t *testing.T, s engine.Store) {
	inst := fullRecord(engine.KindInstance, "x")
	inst.Bucket.Bucket = "instance-bucket"
	bind := fullRecord(engine.KindBinding, "x")
	bind.Bucket.Bucket = "binding-bucket"
	mustInsert(t, s, inst)
	mustInsert(t, s, bind)

	r := mustGet(t, s, engine.KindBinding, "x")
	r.Phase = engine.PhaseReady
	if err := s.Update(ctx(t), r); err != nil {
		t.Fatalf("Update binding/x: %v", err)
	}
	if diff := cmp.Diff(inst, mustGet(t, s, engine.KindInstance, "x"), timeOpts); diff != "" {
		t.Errorf("instance/x after Update of binding/x (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(r, mustGet(t, s, engine.KindBinding, "x"), timeOpts); diff != "" {
		t.Errorf("binding/x (-want +got):\n%s", diff)
	}
}

// race starts n goroutines that each run prepare, wait until all have
// prepared, then run act, so that the acts overlap as much as possible. It
// returns the errors of act, indexed by goroutine.
func race(n int, prepare func(i int) error, act func(i int) error) []error {
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			err := prepare(i)
			ready.Done()
			<-start
			if err != nil {
				errs[i] = fmt.Errorf("prepare: %w", err)
				return
			}
			errs[i] = act(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return errs
}

// tally counts nil errors and errors matching want, and fails the test for
// any other error.
func tally(t *testing.T, errs []error, want error) (ok, matched int) {
	t.Helper()
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, want):
			matched++
		default:
			t.Errorf("goroutine %d: unexpected error: %v", i, err)
		}
	}
	return ok, matched
}

func testConcurrentInsert(t *testing.T, s engine.Store) {
	c := ctx(t)
	recs := make([]*engine.Record, inserters)
	errs := race(inserters,
		func(i int) error {
			recs[i] = record(engine.KindInstance, "same", "", engine.OpInProgress)
			recs[i].Fingerprint = fmt.Sprintf("fp-%d", i)
			return nil
		},
		func(i int) error { return s.Insert(c, recs[i]) })

	ok, exists := tally(t, errs, engine.ErrExists)
	if ok != 1 || exists != inserters-1 {
		t.Fatalf("%d concurrent Inserts: %d succeeded and %d got ErrExists, want 1 and %d", inserters, ok, exists, inserters-1)
	}
	winner := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	got := mustGet(t, s, engine.KindInstance, "same")
	if diff := cmp.Diff(recs[winner], got, timeOpts); diff != "" {
		t.Errorf("stored record is not the winner's (-winner +stored):\n%s", diff)
	}
}

func testConcurrentUpdate(t *testing.T, s engine.Store) {
	mustInsert(t, s, record(engine.KindBinding, "same", "i1", engine.OpInProgress))
	c := ctx(t)
	recs := make([]*engine.Record, updaters)
	errs := race(updaters,
		func(i int) error {
			r, err := s.Get(c, engine.KindBinding, "same")
			if err != nil {
				return err
			}
			r.Op.Description = fmt.Sprintf("written by %d", i)
			recs[i] = r
			return nil
		},
		func(i int) error { return s.Update(c, recs[i]) })

	ok, stale := tally(t, errs, engine.ErrStale)
	if ok != 1 || stale != updaters-1 {
		t.Fatalf("%d concurrent Updates: %d succeeded and %d got ErrStale, want 1 and %d", updaters, ok, stale, updaters-1)
	}
	winner := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	got := mustGet(t, s, engine.KindBinding, "same")
	if got.Version != 2 {
		t.Errorf("after concurrent Updates: Version = %d, want 2", got.Version)
	}
	if diff := cmp.Diff(recs[winner], got, timeOpts); diff != "" {
		t.Errorf("stored record is not the winner's (-winner +stored):\n%s", diff)
	}
}

func testCanceledContext(t *testing.T, s engine.Store) {
	mustInsert(t, s, record(engine.KindInstance, "existing", "", engine.OpInProgress))
	existing := mustGet(t, s, engine.KindInstance, "existing")

	canceled, cancel := context.WithCancel(t.Context())
	cancel()

	if err := s.Insert(canceled, record(engine.KindInstance, "new", "", engine.OpInProgress)); !errors.Is(err, context.Canceled) {
		t.Errorf("Insert with a canceled context: got error %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx(t), engine.KindInstance, "new"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after a canceled Insert: got error %v, want ErrNotFound", err)
	}
	if _, err := s.Get(canceled, engine.KindInstance, "existing"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context: got error %v, want context.Canceled", err)
	}
	r := existing.Clone()
	r.Phase = engine.PhaseFailed
	if err := s.Update(canceled, r); !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a canceled context: got error %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(existing, mustGet(t, s, engine.KindInstance, "existing"), timeOpts); diff != "" {
		t.Errorf("canceled Update changed the record (-want +got):\n%s", diff)
	}
	if _, err := s.List(canceled, engine.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a canceled context: got error %v, want context.Canceled", err)
	}
}
