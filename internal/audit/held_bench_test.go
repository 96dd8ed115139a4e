package audit_test

import (
	"context"
	"errors"
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
	order := madeOrder(n) // the backend's and the store's, before the measure
	var most uint64
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapAlloc, ms.HeapAlloc
		st := &madeStore{n: n, order: order, measure: func() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}}
		rep, err := audit.Run(context.Background(), audit.Options{Store: st, Driver: madeDriver{n: n, order: order}, Prefix: "bb"})
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

// madeName is the name of the bucket or user of the i-th instance or
// binding.
func madeName(kind engine.Kind, i int) string {
	if kind == engine.KindBinding {
		return driver.UserName("bb", string(kind), madeID(kind, i))
	}
	return driver.BucketName("bb", string(kind), madeID(kind, i))
}

// madeOrders are the positions of the instances and bindings in the
// order of their resources' names, by kind.
type madeOrders map[engine.Kind][]int32

func madeOrder(n int) madeOrders {
	o := madeOrders{}
	for _, kind := range []engine.Kind{engine.KindInstance, engine.KindBinding} {
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = madeName(kind, i)
		}
		sort.Slice(idx, func(a, b int) bool { return names[idx[a]] < names[idx[b]] })
		o[kind] = idx
	}
	return o
}

// madeStore lists n ready instances and their bindings, in (kind, id)
// order or by name, calling measure at each page.
type madeStore struct {
	n       int
	order   madeOrders
	measure func()
}

// made returns the i-th instance or binding.
func (s *madeStore) made(kind engine.Kind, i int) *engine.Record {
	id := madeID(kind, i)
	r := &engine.Record{Kind: kind, ID: id, Phase: engine.PhaseReady, Version: 3,
		Backend: "bucket", Bucket: &engine.BucketState{Owner: driver.OwnerMark(string(kind), id)},
		Op: engine.Operation{ID: "op-" + id, Type: engine.OpProvision, State: engine.OpSucceeded, StartedAt: time.Unix(0, 0)}}
	if kind == engine.KindBinding {
		r.Bucket.UserName, r.Bucket.AccessKeyID, r.Op.Type = madeName(kind, i), madeKey(i), engine.OpBind
		r.InstanceID = madeID(engine.KindInstance, i)
	} else {
		r.Bucket.Bucket = madeName(kind, i)
	}
	return r
}

func (s *madeStore) Get(_ context.Context, kind engine.Kind, id string) (*engine.Record, error) {
	var i int
	if _, err := fmt.Sscanf(id, "%08x", &i); err != nil || i >= s.n || madeID(kind, i) != id {
		return nil, engine.ErrNotFound
	}
	return s.made(kind, i), nil
}

// listByName lists one kind by name: its records after opts.After's
// name and id.
func (s *madeStore) listByName(opts engine.ListOptions) []*engine.Record {
	order := s.order[opts.Kind]
	from := sort.Search(len(order), func(pos int) bool {
		i := int(order[pos])
		name := madeName(opts.Kind, i)
		return name > opts.After.Name || (name == opts.After.Name && madeID(opts.Kind, i) > opts.After.ID)
	})
	var page []*engine.Record
	for pos := from; pos < len(order) && (opts.Limit <= 0 || len(page) < opts.Limit); pos++ {
		page = append(page, s.made(opts.Kind, int(order[pos])))
	}
	return page
}

func (s *madeStore) List(_ context.Context, opts engine.ListOptions) ([]*engine.Record, error) {
	s.measure()
	if opts.ByName {
		return s.listByName(opts), nil
	}
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
		if pos < s.n {
			page = append(page, s.made(engine.KindBinding, pos))
		} else {
			page = append(page, s.made(engine.KindInstance, pos-s.n))
		}
	}
	return page, nil
}

// madeDriver is the backend of madeStore's records: a bucket per
// instance, a user with its key per binding, each listed by name.
type madeDriver struct {
	n     int
	order madeOrders
}

const madePage = 1000

func (d madeDriver) InventoryPages(_ context.Context, _ string, page func(driver.Inventory) error) error {
	for from := 0; from < d.n; from += madePage {
		var p driver.Inventory
		for _, i := range d.order[engine.KindInstance][from:min(from+madePage, d.n)] {
			id := madeID(engine.KindInstance, int(i))
			p.Buckets = append(p.Buckets, driver.OwnedBucket{Name: madeName(engine.KindInstance, int(i)), Owner: driver.OwnerMark("instance", id)})
		}
		if err := page(p); err != nil {
			return err
		}
	}
	for from := 0; from < d.n; from += madePage {
		var p driver.Inventory
		for _, i := range d.order[engine.KindBinding][from:min(from+madePage, d.n)] {
			id := madeID(engine.KindBinding, int(i))
			p.Users = append(p.Users, driver.OwnedUser{Name: madeName(engine.KindBinding, int(i)), Owner: driver.OwnerMark("binding", id),
				KeyIDs: []string{madeKey(int(i))}})
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

func (madeDriver) Observe(context.Context, driver.ObserveRequest) (driver.Observation, error) {
	return driver.Observation{}, errors.New("made-up backend: nothing is missing")
}

func (madeDriver) DeleteAccessKey(context.Context, string, string, string) error { return nil }

func (madeDriver) DeleteBucket(context.Context, string, string, bool) error { return nil }

func (madeDriver) RevokeCredential(context.Context, string, string) error { return nil }
