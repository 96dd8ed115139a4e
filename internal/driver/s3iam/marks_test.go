package s3iam

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestAtomicUserMarks: the driver says a new user is created with its mark
// in one write only once a CreateUser answer showed it so. Before any
// answer it does not know; on the embedded server (which keeps CreateUser's
// tags) the first new user teaches it; an answer without the mark (a
// server that ignores CreateUser's tags, simulated by the transport) makes
// it false for good, a later answer with the mark notwithstanding.
func TestAtomicUserMarks(t *testing.T) {
	ctx := context.Background()
	g := newGate("", "")
	d := newDriverThrough(t, g)
	create := func() {
		t.Helper()
		spec := driver.CredentialSpec{
			UserName: "bbtest-marks-" + randomHex(4), Owner: driver.OwnerMark("binding", randomHex(4)),
			Bucket: "bbtest-marks", Access: driver.AccessReadOnly,
		}
		t.Cleanup(func() { _ = d.RevokeCredential(ctx, spec.UserName, spec.Owner) })
		if _, err := d.EnsureCredential(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Observe(ctx, driver.ObserveRequest{UserName: "bbtest-marks-none"}); err != nil {
		t.Fatal(err)
	}
	if d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks before any CreateUser = true, want false (not known yet)")
	}
	create()
	if !d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks after the embedded server kept CreateUser's tags = false, want true")
	}
	g.untagged = true
	create()
	if d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks after a CreateUser answer without the mark = true, want false")
	}
	g.untagged = false
	create()
	if d.AtomicUserMarks() {
		t.Error("AtomicUserMarks after the mark was dropped once, then kept = true, want false for good")
	}
}

// TestBucketMarkInCreate: the owner mark and the tags travel in
// CreateBucket. The first new bucket of a driver reads them back once
// (GetBucketTagging instead of PutBucketTagging: the same two requests);
// on the embedded server, which keeps them, every later new bucket is one
// request, CreateBucket, and carries its mark and tags; a versioned one is
// CreateBucket, then PutBucketVersioning alone.
func TestBucketMarkInCreate(t *testing.T) {
	ctx := context.Background()
	g := newGate("", "")
	d := newDriverThrough(t, g)
	for i, tc := range []struct {
		versioning bool
		want       []string
	}{
		{false, []string{"CreateBucket", "GetBucketTagging"}},
		{false, []string{"CreateBucket"}},
		{true, []string{"CreateBucket", "PutBucketVersioning"}},
	} {
		spec := newBucketSpec(t, d)
		spec.Versioning = tc.versioning
		if err := d.EnsureBucket(ctx, spec); err != nil {
			t.Fatalf("bucket %d: EnsureBucket: %v", i, err)
		}
		actions, _ := g.seen()
		if creates := g.creates(); !slices.Equal(actions, tc.want) || !slices.Equal(creates, []bool{true}) {
			t.Errorf("bucket %d: requests %v, creates with tags %v; want %v, one create with tags", i, actions, creates, tc.want)
		}
		wantTags(ctx, t, spec)
	}
	if !d.bucketMarks.kept() {
		t.Error("the driver did not learn that the embedded server keeps CreateBucket's tags")
	}
}

// TestBucketMarkFallback: on a server that ignores the tags in CreateBucket
// (the transport takes them away after the create) or refuses them (400
// MalformedXML), the first new bucket is marked all the same, and from
// then on, for the driver's life, the create carries no tags and the mark
// is written in its own call (PutBucketTagging).
func TestBucketMarkFallback(t *testing.T) {
	ctx := context.Background()
	plain := newDriver(t, serverConfig())
	for name, tc := range map[string]struct {
		set   func(g *gate)
		first []string
		tags  []bool
	}{
		"ignored": {
			set: func(g *gate) {
				g.dropCreateTags = func(bucket string) {
					if _, err := plain.s3.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: &bucket}); err != nil {
						t.Errorf("take the tags of %s away: %v", bucket, err)
					}
				}
			},
			first: []string{"CreateBucket", "GetBucketTagging", "PutBucketTagging"},
			tags:  []bool{true},
		},
		"refused": {
			set:   func(g *gate) { g.refuseCreateTags = true },
			first: []string{"CreateBucket", "CreateBucket", "PutBucketTagging"},
			tags:  []bool{true, false},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := newGate("", "")
			tc.set(g)
			d := newDriverThrough(t, g)
			for i, want := range [][]string{tc.first, {"CreateBucket", "PutBucketTagging"}} {
				spec := newBucketSpec(t, d)
				if err := d.EnsureBucket(ctx, spec); err != nil {
					t.Fatalf("bucket %d: EnsureBucket: %v", i, err)
				}
				actions, _ := g.seen()
				wantCreates := tc.tags
				if i > 0 {
					wantCreates = []bool{false}
				}
				if creates := g.creates(); !slices.Equal(actions, want) || !slices.Equal(creates, wantCreates) {
					t.Errorf("bucket %d: requests %v, creates with tags %v; want %v, %v", i, actions, creates, want, wantCreates)
				}
				wantTags(ctx, t, spec)
			}
			if !d.bucketMarks.dropped() {
				t.Error("the driver did not learn that the server drops CreateBucket's tags")
			}
		})
	}
}

// newBucketSpec names a new bucket with an owner and a label, deleted when
// t ends.
func newBucketSpec(t *testing.T, d *Driver) driver.BucketSpec {
	t.Helper()
	spec := driver.BucketSpec{Name: driver.BucketName("bbtest", "cmark", randomHex(8)),
		Owner: driver.OwnerMark("instance", randomHex(4)), Tags: map[string]string{"team": "a"}}
	t.Cleanup(func() { _ = d.DeleteBucket(context.Background(), spec.Name, spec.Owner, true) })
	return spec
}

// wantTags fails t unless spec's bucket carries its owner mark and tags,
// as a driver of its own sees them.
func wantTags(ctx context.Context, t *testing.T, spec driver.BucketSpec) {
	t.Helper()
	b, err := newDriver(t, serverConfig()).observeBucket(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if b.owner() != spec.Owner || b.tags["team"] != spec.Tags["team"] {
		t.Errorf("bucket %s has tags %v, want owner %q and team %q", spec.Name, b.tags, spec.Owner, spec.Tags["team"])
	}
}
