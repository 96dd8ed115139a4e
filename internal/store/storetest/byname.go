package storetest

import (
	"cmp"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// named is a record with a resource name: an instance's bucket, a
// binding's user (and its instance's bucket, which must not count).
func named(kind engine.Kind, id, name string) *engine.Record {
	r := record(kind, id, "", engine.OpSucceeded)
	if kind == engine.KindBinding {
		r.Bucket = &engine.BucketState{UserName: name, Bucket: "zz-bucket-of-" + id}
	} else {
		r.Bucket = &engine.BucketState{Bucket: name}
	}
	return r
}

// byName is the order a listing by name must have: resource name, then
// id, bytewise (Go's string order).
func byName(rs []*engine.Record) []string {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b *engine.Record) int {
		return cmp.Or(cmp.Compare(a.ResourceName(), b.ResourceName()), cmp.Compare(a.ID, b.ID))
	})
	return keys(rs)
}

func testListByName(t *testing.T, s engine.Store) {
	// Names whose byte order differs from a locale's ("B" < "Z" < "a" <
	// "b10" < "b2" < "ä"), ids in another order than their names, two
	// records of one name (ties by id), an upstream record without one
	// (first), and records of the other kind between them.
	var instances, bindings []*engine.Record
	for i, name := range []string{"b2", "a", "ä", "Z", "b10", "B", "a", "bb-x"} {
		id := string(rune('p' - i)) // p, o, n, ...: against the names' order
		instances = append(instances, named(engine.KindInstance, id, name))
		bindings = append(bindings, named(engine.KindBinding, "b-"+id, "u-"+name))
	}
	up := record(engine.KindInstance, "up", "", engine.OpSucceeded)
	up.Backend, up.Upstream = "db", &engine.UpstreamState{}
	instances = append(instances, up)
	for _, r := range slices.Concat(instances, bindings) {
		mustInsert(t, s, r)
	}
	for _, tc := range []struct {
		kind engine.Kind
		all  []*engine.Record
	}{{engine.KindInstance, instances}, {engine.KindBinding, bindings}} {
		want := byName(tc.all)
		whole, err := s.List(ctx(t), engine.ListOptions{Kind: tc.kind, ByName: true})
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(want, keys(whole)); diff != "" {
			t.Errorf("List of the %ss by name (-want +got):\n%s", tc.kind, diff)
		}
		for _, limit := range []int{1, 2, 3, 100} {
			got, _ := listPages(t, s, engine.ListOptions{Kind: tc.kind, ByName: true}, limit, nil)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("%ss by name in pages of %d (-want +got):\n%s", tc.kind, limit, diff)
			}
		}
	}

	// Update writes the name: a record moves to its new name's place,
	// and pages after a cursor follow it.
	r := mustGet(t, s, engine.KindInstance, "up")
	r.Backend, r.Upstream, r.Bucket = "bucket", nil, &engine.BucketState{Bucket: "b1"}
	if err := s.Update(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	instances[len(instances)-1] = r
	got, _ := listPages(t, s, engine.ListOptions{Kind: engine.KindInstance, ByName: true}, 2, nil)
	if diff := gocmp.Diff(byName(instances), got); diff != "" {
		t.Errorf("instances by name after an update renamed one (-want +got):\n%s", diff)
	}
	after, err := s.List(ctx(t), engine.ListOptions{Kind: engine.KindInstance, ByName: true, After: engine.KeyOf(r)})
	if err != nil {
		t.Fatal(err)
	}
	all := byName(instances)
	if diff := gocmp.Diff(all[slices.Index(all, "instance/up")+1:], keys(after)); diff != "" {
		t.Errorf("instances by name after %q (-want +got):\n%s", r.Bucket.Bucket, diff)
	}

	if got, err := s.List(ctx(t), engine.ListOptions{ByName: true}); err == nil {
		t.Errorf("List by name without a kind = %d records, want an error", len(got))
	}
}
