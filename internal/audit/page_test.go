package audit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// heldStore wraps a store: every List must ask for a page, and each record
// it hands out is a copy of its own, watched through a weak pointer, so
// that what is still reachable after a collection is what the audit holds.
type heldStore struct {
	t     *testing.T
	inner audit.Store
	limit int

	mu       sync.Mutex
	handed   []weak.Pointer[engine.Record]
	lists    int
	mostHeld int // records of earlier pages reachable at a List
}

func (s *heldStore) List(ctx context.Context, opts engine.ListOptions) ([]*engine.Record, error) {
	if opts.Limit <= 0 || opts.Limit > s.limit {
		s.t.Errorf("List(%+v): want a page of at most %d records", opts, s.limit)
	}
	s.mostHeld = max(s.mostHeld, s.held())
	page, err := s.inner.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	for i, r := range page {
		page[i] = r.Clone() // the inner store may keep its own (a cache)
		s.handed = append(s.handed, weak.Make(page[i]))
	}
	return page, nil
}

// Get passes the inner store's record on: the audit reads a record again
// before it reports a finding of it.
func (s *heldStore) Get(ctx context.Context, kind engine.Kind, id string) (*engine.Record, error) {
	return s.inner.Get(ctx, kind, id)
}

// Unreadable passes the inner store's report on, as the audit reads it.
func (s *heldStore) Unreadable() []engine.UnreadableRecord {
	return s.inner.(engine.UnreadableReporter).Unreadable()
}

// held collects garbage and counts the records handed out that are still
// reachable.
func (s *heldStore) held() int {
	runtime.GC()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.handed {
		if p.Value() != nil {
			n++
		}
	}
	return n
}

// heldDriver wraps a driver: its inventory is handed out one resource a
// page, each page a copy of its own watched through a weak pointer, so
// that what is still reachable after a collection is what the audit
// holds of the pages; Inventory, the whole at once, is refused.
type heldDriver struct {
	*s3iam.Driver
	t *testing.T

	handed   []func() bool // whether a page's resources are reachable
	pages    int
	mostHeld int // pages before the previous one reachable at a page
}

func (d *heldDriver) Inventory(context.Context, string) (driver.Inventory, error) {
	d.t.Error("Inventory: the audit asked for the whole inventory at once, want it a page at a time")
	return driver.Inventory{}, errors.New("whole inventory refused")
}

func (d *heldDriver) InventoryPages(ctx context.Context, prefix string, page func(driver.Inventory) error) error {
	return d.Driver.InventoryPages(ctx, prefix, func(inv driver.Inventory) error {
		for _, b := range inv.Buckets {
			if err := d.hand(page, driver.Inventory{Buckets: []driver.OwnedBucket{b}}); err != nil {
				return err
			}
		}
		for _, u := range inv.Users {
			u.KeyIDs = slices.Clone(u.KeyIDs)
			if err := d.hand(page, driver.Inventory{Users: []driver.OwnedUser{u}}); err != nil {
				return err
			}
		}
		return nil
	})
}

// hand hands out a page of one resource, watching the array that holds
// it: a copy of the strings in it keeps it no longer, the page does.
func (d *heldDriver) hand(page func(driver.Inventory) error, inv driver.Inventory) error {
	d.mostHeld = max(d.mostHeld, d.held())
	if len(inv.Buckets) > 0 {
		p := weak.Make(&inv.Buckets[0])
		d.handed = append(d.handed, func() bool { return p.Value() != nil })
	} else {
		p := weak.Make(&inv.Users[0])
		d.handed = append(d.handed, func() bool { return p.Value() != nil })
	}
	d.pages++
	return page(inv)
}

// held collects garbage and counts the pages handed out that are still
// reachable.
func (d *heldDriver) held() int {
	runtime.GC()
	n := 0
	for _, alive := range d.handed {
		if alive() {
			n++
		}
	}
	return n
}

// TestHeldAPageAtATime pins the audit's bounded memory, by count, not by
// time or bytes: Run takes the driver's inventory in pages and keeps none
// of them (only the judged resources' names, marks and keys); Run and Fix
// read the store in pages, and at each page no more than the previous
// page's records are still reachable (none once they return); the
// verdicts still join records and resources across pages.
func TestHeldAPageAtATime(t *testing.T) {
	const page = 3
	audit.SetPageSize(t, page)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, embedded)
	w.engine(t, func(e *engine.Engine) {
		w.provision(t, e, "kept")
		w.bind(t, e, "kept", "app")
	})
	// 20 deprovisioned instances: tombstones over seven pages, and the
	// bucket of one of them in the middle left behind (a leak whose
	// verdict is the tombstone's), and a bucket no record knows.
	for i := range 20 {
		id := fmt.Sprintf("old-%02d", i)
		must(t, w.store.Insert(ctx, &engine.Record{Kind: engine.KindInstance, ID: id, Phase: engine.PhaseDeleted,
			Backend: "bucket", Bucket: &engine.BucketState{Bucket: w.bucket(id), Owner: driver.OwnerMark("instance", id)},
			Op: engine.Operation{ID: "op-" + id, Type: engine.OpDeprovision, State: engine.OpSucceeded, StartedAt: time.Now()}}))
	}
	w.removeAfter(t, []string{w.bucket("kept"), w.bucket("old-09"), w.bucket("stray")}, []string{w.user("app")})
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: w.bucket("old-09"), Owner: driver.OwnerMark("instance", "old-09")}))
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: w.bucket("stray"), Owner: driver.OwnerMark("instance", "stray")}))

	st := &heldStore{t: t, inner: w.store, limit: page}
	drv := &heldDriver{Driver: w.drv, t: t}
	opts := audit.Options{Store: st, Driver: drv, Prefix: w.prefix}
	rep, err := audit.Run(ctx, opts)
	must(t, err)
	// Three buckets and a user, a page each.
	if drv.pages != 4 {
		t.Errorf("Run took the inventory in %d pages, want 4 of one resource", drv.pages)
	}
	if drv.mostHeld > 0 {
		t.Errorf("Run held %d pages of the inventory at the next page, want none", drv.mostHeld)
	}
	if n := drv.held(); n != 0 {
		t.Errorf("%d pages of the inventory still reachable after Run, want none", n)
	}
	want := []short{
		{audit.KindLeak, audit.ResourceBucket, w.bucket("old-09"), "", false},
		{audit.KindLeak, audit.ResourceBucket, w.bucket("stray"), "", false},
	}
	if diff := cmp.Diff(want, shorten(rep.Findings)); diff != "" {
		t.Errorf("findings across pages: -want +got:\n%s", diff)
	}
	if d := rep.Findings[0].Detail; !strings.Contains(d, "instance/old-09 was deleted") {
		t.Errorf("leak of old-09: detail %q, want its tombstone named", d)
	}
	if rep.Records != 22 {
		t.Errorf("Records = %d, want 22", rep.Records)
	}
	// Each kind by name (21 instances, a binding: 8 and 1 pages), then
	// the last pass over all, for the bucket no record knows (8 pages).
	if want := 21/page + 1 + 1 + 22/page + 1; st.lists != want {
		t.Errorf("Run listed the store %d times, want %d pages of %d", st.lists, want, page)
	}
	if st.mostHeld > page {
		t.Errorf("Run held %d records of earlier pages at a List, want at most one page (%d)", st.mostHeld, page)
	}
	if n := st.held(); n != 0 {
		t.Errorf("%d records still reachable after Run, want none", n)
	}

	st.mostHeld = 0
	must(t, audit.Fix(ctx, opts, rep))
	if !rep.Findings[0].Fixed || !rep.Findings[1].Fixed {
		t.Errorf("Fix: %+v, want both leaks deleted", rep.Findings)
	}
	if st.mostHeld > page {
		t.Errorf("Fix held %d records of earlier pages at a List, want at most one page (%d)", st.mostHeld, page)
	}
	if n := st.held(); n != 0 {
		t.Errorf("%d records still reachable after Fix, want none", n)
	}
	runtime.KeepAlive(rep)
}
