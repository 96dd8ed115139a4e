package audit_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

var heldInstances = flag.Int("held-instances", 20000, "instances (a bucket and a bound user each) BenchmarkRunHeld audits")

// BenchmarkRunHeld measures what an audit holds per instance, in bytes of
// live heap, and nothing else: a backend and a store of -held-instances
// instances with one binding each, names, marks and keys as the broker
// makes them, all in order (no drift), made up as they are listed, as a
// driver and a store decode them. Before Run and at each store page the
// heap is collected and measured; held-B/instance is the largest growth
// over the start, per instance.
func BenchmarkRunHeld(b *testing.B) {
	n := *heldInstances
	var most uint64
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapAlloc, ms.HeapAlloc
		st := &madeStore{n: n, measure: func() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}}
		rep, err := audit.Run(context.Background(), audit.Options{Store: st, Driver: madeDriver{n: n}, Prefix: "bb"})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Drift() || rep.Records != 2*n || rep.Buckets != n || rep.Users != n {
			b.Fatalf("audit of the made-up backend: %d findings, %d records, %d buckets, %d users; want none, %d, %d and %d",
				len(rep.Findings), rep.Records, rep.Buckets, rep.Users, 2*n, n, n)
		}
		most = max(most, peak-base)
	}
	b.ReportMetric(float64(most)/float64(n), "held-B/instance")
}

func madeID(kind engine.Kind, i int) string {
	if kind == engine.KindBinding {
		return fmt.Sprintf("%08x-5b1e-4c2d-9f3a-%012x", i, i)
	}
	return fmt.Sprintf("%08x-7a2c-4e1b-8d4f-%012x", i, i)
}

func madeKey(i int) string { return fmt.Sprintf("AKIA%016X", i) }

// madeStore lists n ready instances and their bindings, in (kind, id)
// order, calling measure at each page.
type madeStore struct {
	n       int
	measure func()
}

func (s *madeStore) List(_ context.Context, opts engine.ListOptions) ([]*engine.Record, error) {
	s.measure()
	// Bindings sort before instances: positions 0..n-1 and n..2n-1.
	key := func(pos int) engine.RecordKey {
		if pos < s.n {
			return engine.RecordKey{Kind: engine.KindBinding, ID: madeID(engine.KindBinding, pos)}
		}
		return engine.RecordKey{Kind: engine.KindInstance, ID: madeID(engine.KindInstance, pos-s.n)}
	}
	from := 0
	if opts.After != (engine.RecordKey{}) {
		from = sort.Search(2*s.n, func(pos int) bool {
			k := key(pos)
			return k.Kind > opts.After.Kind || (k.Kind == opts.After.Kind && k.ID > opts.After.ID)
		})
	}
	var page []*engine.Record
	for pos := from; pos < 2*s.n && (opts.Limit <= 0 || len(page) < opts.Limit); pos++ {
		k := key(pos)
		r := &engine.Record{Kind: k.Kind, ID: k.ID, Phase: engine.PhaseReady, Version: 3,
			Owner: driver.OwnerMark(string(k.Kind), k.ID),
			Op:    engine.Operation{ID: "op-" + k.ID, Type: engine.OpProvision, State: engine.OpSucceeded, StartedAt: time.Unix(0, 0)}}
		if k.Kind == engine.KindBinding {
			r.UserName, r.AccessKeyID, r.Op.Type = driver.UserName("bb", string(k.Kind), k.ID), madeKey(pos), engine.OpBind
			r.InstanceID = madeID(engine.KindInstance, pos)
		} else {
			r.Bucket = driver.BucketName("bb", string(k.Kind), k.ID)
		}
		page = append(page, r)
	}
	return page, nil
}

// madeDriver is the backend of madeStore's records: a bucket per
// instance, a user with its key per binding.
type madeDriver struct{ n int }

const madePage = 1000

func (d madeDriver) InventoryPages(_ context.Context, _ string, page func(driver.Inventory) error) error {
	for from := 0; from < d.n; from += madePage {
		var p driver.Inventory
		for i := from; i < min(from+madePage, d.n); i++ {
			id := madeID(engine.KindInstance, i)
			p.Buckets = append(p.Buckets, driver.OwnedBucket{Name: driver.BucketName("bb", "instance", id), Owner: driver.OwnerMark("instance", id)})
		}
		if err := page(p); err != nil {
			return err
		}
	}
	for from := 0; from < d.n; from += madePage {
		var p driver.Inventory
		for i := from; i < min(from+madePage, d.n); i++ {
			id := madeID(engine.KindBinding, i)
			p.Users = append(p.Users, driver.OwnedUser{Name: driver.UserName("bb", "binding", id), Owner: driver.OwnerMark("binding", id),
				KeyIDs: []string{madeKey(i)}})
		}
		if err := page(p); err != nil {
			return err
		}
	}
	return nil
}

func (d madeDriver) Inventory(ctx context.Context, prefix string) (driver.Inventory, error) {
	var inv driver.Inventory
	err := d.InventoryPages(ctx, prefix, func(p driver.Inventory) error {
		inv.Buckets = append(inv.Buckets, p.Buckets...)
		inv.Users = append(inv.Users, p.Users...)
		return nil
	})
	return inv, err
}

func (madeDriver) DeleteAccessKey(context.Context, string, string, string) error { return nil }

func (madeDriver) DeleteBucket(context.Context, string, string, bool) error { return nil }

func (madeDriver) RevokeCredential(context.Context, string, string) error { return nil }
