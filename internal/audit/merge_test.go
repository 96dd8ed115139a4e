package audit_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// pagedDriver hands the real driver's inventory out in pages of size
// resources, buckets then users, each page read afresh past the names
// handed before it (as a server's listing pages with a marker), so that
// a test can change the backend and the store between two pages, or
// between a page's read and its hand-out (at). Descending lists the
// pages in descending order of names, each page ascending: out of order.
type pagedDriver struct {
	*s3iam.Driver
	size       int
	descending bool
	// at is called before page n of the resource type is read (read
	// false) and once it is read, before it is handed out (read true).
	at func(resource string, n int, read bool)
	// looks counts the audit's Observe calls: one per missing resource
	// it confirms.
	looks atomic.Int32
}

func (d *pagedDriver) Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	d.looks.Add(1)
	return d.Driver.Observe(ctx, req)
}

func (d *pagedDriver) InventoryPages(ctx context.Context, prefix string, page func(driver.Inventory) error) error {
	for _, resource := range []string{audit.ResourceBucket, audit.ResourceUser} {
		var marker string
		for n := 1; ; n++ {
			if d.at != nil {
				d.at(resource, n, false)
			}
			inv, err := d.Inventory(ctx, prefix)
			if err != nil {
				return err
			}
			var p driver.Inventory
			if resource == audit.ResourceBucket {
				p.Buckets = nextPage(inv.Buckets, marker, d.size, d.descending, func(b driver.OwnedBucket) string { return b.Name })
			} else {
				p.Users = nextPage(inv.Users, marker, d.size, d.descending, func(u driver.OwnedUser) string { return u.Name })
			}
			if len(p.Buckets)+len(p.Users) == 0 {
				break
			}
			if d.at != nil {
				d.at(resource, n, true)
			}
			var names []string
			for _, b := range p.Buckets {
				names = append(names, b.Name)
			}
			for _, u := range p.Users {
				names = append(names, u.Name)
			}
			marker = names[len(names)-1]
			if d.descending {
				marker = names[0]
			}
			if err := page(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// nextPage returns the next size resources of all (sorted by name) past
// marker, the previous page's last name (its first with descending), as
// a listing's marker: the first ones after it, or with descending the
// last ones before it. An empty marker starts the listing.
func nextPage[T any](all []T, marker string, size int, descending bool, name func(T) string) []T {
	if marker != "" {
		all = slices.DeleteFunc(all, func(r T) bool {
			if descending {
				return name(r) >= marker
			}
			return name(r) <= marker
		})
	}
	if descending {
		return all[max(0, len(all)-size):]
	}
	return all[:min(size, len(all))]
}

// driftWorld makes, on the real server behind a real engine, resources
// and records whose names interleave (names sort by the ids' slugs):
// kept instances and bindings (one with a key of its user's it does not
// hold), a missing bucket and a missing user,
// leaked buckets and a leaked user (none with a record, one of a
// tombstone), in every position between them; and returns the findings
// an audit must make.
func driftWorld(t *testing.T) (*world, []short) {
	ctx := t.Context()
	w := newWorld(t, embedded)
	var kept []string
	w.engine(t, func(e *engine.Engine) {
		for _, id := range []string{"b-kept", "d-lost", "f-kept", "h-gone", "j-kept"} {
			w.provision(t, e, id)
			kept = append(kept, id)
		}
		w.bind(t, e, "b-kept", "c-app")
		w.bind(t, e, "j-kept", "i-app")
		w.bind(t, e, "b-kept", "g-lost")
		if _, err := e.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "h-gone", ServiceID: serviceID, PlanID: planStd}); err != nil {
			t.Fatalf("deprovision: %v", err)
		}
	})
	var buckets []string
	for _, id := range append(kept, "a-leak", "e-leak", "k-leak") {
		buckets = append(buckets, w.bucket(id))
	}
	w.removeAfter(t, buckets, []string{w.user("c-app"), w.user("i-app"), w.user("g-lost"), w.user("e-leak")})
	// An unknown key: a second key of i-app's user.
	extra, err := w.iam.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(w.user("i-app"))})
	must(t, err)
	for _, id := range []string{"a-leak", "e-leak", "k-leak", "h-gone"} {
		must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: w.bucket(id), Owner: driver.OwnerMark("instance", id)}))
	}
	_, err = w.drv.EnsureCredential(ctx, driver.CredentialSpec{UserName: w.user("e-leak"), Owner: driver.OwnerMark("binding", "e-leak"),
		Bucket: w.bucket("b-kept"), Access: driver.AccessReadOnly})
	must(t, err)
	_, err = w.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(w.bucket("d-lost"))})
	must(t, err)
	must(t, w.drv.RevokeCredential(ctx, w.user("g-lost"), driver.OwnerMark("binding", "g-lost")))
	return w, []short{
		{audit.KindLeak, audit.ResourceBucket, w.bucket("a-leak"), "", false},
		{audit.KindLeak, audit.ResourceBucket, w.bucket("e-leak"), "", false},
		{audit.KindLeak, audit.ResourceBucket, w.bucket("h-gone"), "", false},
		{audit.KindLeak, audit.ResourceBucket, w.bucket("k-leak"), "", false},
		{audit.KindLeak, audit.ResourceUser, w.user("e-leak"), "", false},
		{audit.KindMissing, audit.ResourceBucket, w.bucket("d-lost"), "instance/d-lost", false},
		{audit.KindMissing, audit.ResourceUser, w.user("g-lost"), "binding/g-lost", false},
		{audit.KindUnknownKey, audit.ResourceKey, aws.ToString(extra.AccessKey.AccessKeyId), "binding/i-app", false},
	}
}

// TestMergeAtPageBoundaries: the same findings, with the same details,
// whatever the sizes of the inventory's pages and of the store's, so that
// a name present on one side only falls at every place of a page: first,
// last, alone, between pages of the other side.
func TestMergeAtPageBoundaries(t *testing.T) {
	w, want := driftWorld(t)
	ctx := t.Context()
	whole, err := audit.Run(ctx, audit.Options{Store: w.store, Driver: w.drv, Prefix: w.prefix})
	must(t, err)
	if diff := cmp.Diff(want, shorten(whole.Findings)); diff != "" {
		t.Fatalf("findings: -want +got:\n%s", diff)
	}
	for _, size := range []int{1, 2, 3} {
		for _, page := range []int{1, 2, 3} {
			audit.SetPageSize(t, page)
			drv := &pagedDriver{Driver: w.drv, size: size}
			rep, err := audit.Run(ctx, audit.Options{Store: w.store, Driver: drv, Prefix: w.prefix})
			must(t, err)
			if diff := cmp.Diff(whole, rep, cmp.AllowUnexported(audit.Finding{})); diff != "" {
				t.Errorf("inventory pages of %d, store pages of %d: -whole +paged:\n%s", size, page, diff)
			}
			if n := drv.looks.Load(); n != 2 {
				t.Errorf("inventory pages of %d, store pages of %d: %d looks at single resources, want 2 (the missing ones)", size, page, n)
			}
		}
	}
}

// TestMergeFallsBackOutOfOrder: a backend whose pages come out of name
// order (IAM does not promise ListUsers' order) is judged held, with the
// same findings, and the log says so. (Merged as if in order, each
// record before its resource's page would be taken for missing and
// looked at alone, and each resource settled in the last pass: right,
// but a look per record.)
func TestMergeFallsBackOutOfOrder(t *testing.T) {
	w, want := driftWorld(t)
	ctx := t.Context()
	audit.SetPageSize(t, 2)
	var log bytes.Buffer
	drv := &pagedDriver{Driver: w.drv, size: 1, descending: true}
	rep, err := audit.Run(ctx, audit.Options{Store: w.store, Driver: drv, Prefix: w.prefix,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	must(t, err)
	// Held, a kind's records are judged against its resources: none
	// taken for missing, to be looked at on its own.
	if n := drv.looks.Load(); n != 2 {
		t.Errorf("%d looks at single resources, want 2 (the missing ones)", n)
	}
	if diff := cmp.Diff(want, shorten(rep.Findings)); diff != "" {
		t.Errorf("findings out of order: -want +got:\n%s", diff)
	}
	whole, err := audit.Run(ctx, audit.Options{Store: w.store, Driver: w.drv, Prefix: w.prefix})
	must(t, err)
	if diff := cmp.Diff(whole, rep, cmp.AllowUnexported(audit.Finding{})); diff != "" {
		t.Errorf("report out of order: -in order +out of order:\n%s", diff)
	}
	for _, resource := range []string{audit.ResourceBucket, audit.ResourceUser} {
		if !strings.Contains(log.String(), "out of name order") || !strings.Contains(log.String(), "resource="+resource) {
			t.Errorf("log does not say the %ss came out of name order:\n%s", resource, log.String())
		}
	}
}

// TestMergeRaces: records and resources a running broker writes while
// the audit reads make no finding. The inventory and the store are no
// longer read one after the other: a page of records can be read before
// the inventory's page of their names, or after.
func TestMergeRaces(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, embedded)
	w.engine(t, func(e *engine.Engine) {
		w.provision(t, e, "a-kept")
		w.provision(t, e, "m-back")
		w.provision(t, e, "z-kept")
		if _, err := e.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "m-back", ServiceID: serviceID, PlanID: planStd}); err != nil {
			t.Fatalf("deprovision: %v", err)
		}
	})
	w.removeAfter(t, []string{w.bucket("a-kept"), w.bucket("m-back"), w.bucket("p-new"), w.bucket("q-new"), w.bucket("z-kept")}, nil)
	// A provision in the engine's order: the record (intent), the
	// bucket, the record ready.
	provision := func(id string) {
		r := &engine.Record{Kind: engine.KindInstance, ID: id, Phase: engine.PhaseProvisioning, Backend: "bucket",
			Bucket: &engine.BucketState{Bucket: w.bucket(id), Owner: driver.OwnerMark("instance", id), BucketAttempted: true},
			Op:     engine.Operation{ID: "op-" + id, Type: engine.OpProvision, State: engine.OpInProgress, StartedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}}
		if old, err := w.store.Get(ctx, engine.KindInstance, id); err == nil {
			r.Version = old.Version
			must(t, w.store.Update(ctx, r))
		} else {
			must(t, w.store.Insert(ctx, r))
		}
		must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: r.Bucket.Bucket, Owner: r.Bucket.Owner}))
		r.Phase, r.Op.State, r.Op.EndedAt = engine.PhaseReady, engine.OpSucceeded, time.Now()
		must(t, w.store.Update(ctx, r))
	}
	run := func(name string, drv *pagedDriver) {
		t.Helper()
		var log bytes.Buffer
		rep, err := audit.Run(ctx, audit.Options{Store: w.store, Driver: drv, Prefix: w.prefix, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		must(t, err)
		if len(rep.Findings) > 0 || len(rep.Skipped) > 0 {
			t.Errorf("%s: findings %+v, not judged %+v; want none", name, rep.Findings, rep.Skipped)
		}
		if log.Len() > 0 {
			t.Errorf("%s: the audit logged %s, want the pages merged in order", name, log.String())
		}
	}

	// The first page of buckets (a-kept, z-kept) is read; p-new, between
	// them, is provisioned before the audit reads the store: its ready
	// record comes without its bucket, which exists.
	run("a provision after the page of its name was read", &pagedDriver{Driver: w.drv, size: 2, at: func(resource string, n int, read bool) {
		if resource == audit.ResourceBucket && n == 1 && read {
			provision("p-new")
		}
	}})

	// Pages of one bucket: with the first (a-kept) the audit reads the
	// store's records, all in one page, m-back's tombstone among them;
	// then, before the page of m-back's bucket is read, m-back is
	// provisioned again, and q-new, whose record comes after the store's
	// page was read.
	run("a provision after the page of its record was read", &pagedDriver{Driver: w.drv, size: 1, at: func(resource string, n int, read bool) {
		if resource == audit.ResourceBucket && n == 2 && !read {
			provision("m-back")
			provision("q-new")
		}
	}})
}
