package engine_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// leftover is what a create that died before marking leaves under the
// record's name, and what the record says of it.
type leftover int

const (
	// unmarked: no owner mark, and the record holds the attempt. Ours:
	// the deletion marks it and deletes it.
	unmarked leftover = iota
	// otherMark: another owner's mark (someone tagged it since). Not ours,
	// attempt or not: left as it is.
	otherMark
	// notAttempted: no owner mark and no attempt in the record (as when
	// the look before the intent found the name taken). Not ours: left
	// as it is.
	notAttempted
)

var leftovers = map[string]leftover{"Unmarked": unmarked, "OtherMark": otherMark, "NotAttempted": notAttempted}

// errDied is what the held create call returns when let go: the process
// that made the call died before marking what it created.
var errDied = errors.New("died between creating and marking (test)")

// TestDeprovisionBeforeAdoption: a provision dies between creating its
// bucket and marking it, and the platform deprovisions before any pass
// adopts the bucket. The driver deletes only a bucket with the instance's
// mark; with the attempt recorded, the deprovision marks the unmarked
// bucket first, then deletes it, so nothing is left that no mark or record
// would find again. A bucket with another owner's mark, or one the record
// never attempted, is left untouched, and the deprovision succeeds as
// before.
func TestDeprovisionBeforeAdoption(t *testing.T) {
	for name, kind := range leftovers {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			ctx := context.Background()
			raw := newID()
			id := instancePth + raw
			bucket := driver.BucketName(h.prefix, "instance", raw)

			g := newGate()
			defer g.release()
			var calls atomic.Int32
			h.drv.hook("EnsureBucket", func(ctx context.Context) error {
				if calls.Add(1) > 1 {
					return nil
				}
				if _, err := h.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
					return err
				}
				if kind == otherMark {
					if _, err := h.s3.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: &bucket, Tagging: &s3types.Tagging{
						TagSet: []s3types.Tag{{Key: aws.String(s3iam.OwnerTagKey), Value: aws.String(driver.OwnerMark("instance", "someone-else"))}},
					}}); err != nil {
						return err
					}
				}
				if err := g.hold(ctx); err != nil {
					return err
				}
				return errDied
			})
			h.want(h.do("PUT", async(id), provisionBody(planStd, nil)), http.StatusAccepted, "provision")
			g.waitEntered(t)

			rec, err := h.store.Get(ctx, engine.KindInstance, raw)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Bucket.BucketAttempted {
				t.Fatal("the provision's create call is under way and the record has no bucketAttempted")
			}
			if kind == notAttempted {
				rec.Bucket.BucketAttempted = false
				if err := h.store.Update(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			before := bucketTags(t, h, bucket)

			d := h.want(h.do("DELETE", del(id, planStd, true), nil), http.StatusAccepted, "deprovision")
			g.release()
			if s := h.waitOp(id, d.str("operation")); s != "succeeded" {
				t.Fatalf("deprovision ended %q, want succeeded", s)
			}
			if kind == unmarked {
				if h.bucketExists(bucket) {
					t.Errorf("the unmarked bucket %s of an attempted provision is left after the deprovision", bucket)
				}
				return
			}
			if !h.bucketExists(bucket) {
				t.Fatalf("bucket %s, not the instance's, was deleted", bucket)
			}
			if diff := cmp.Diff(before, bucketTags(t, h, bucket)); diff != "" {
				t.Errorf("the bucket that is not the instance's changed its tags (-before +after):\n%s", diff)
			}
		})
	}
}

// TestUnbindBeforeAdoption is TestDeprovisionBeforeAdoption for a binding's
// user, left unmarked by a bind that died between CreateUser and TagUser
// (SeaweedFS), then unbound, or revoked by its instance's deprovision,
// before any pass adopted it. With the attempt recorded the user is marked
// (which makes a key that is never recorded) and deleted, and the record
// drops the flag: a later bind of the same id looks again. A user with
// another owner's mark, or one never attempted, is left untouched.
func TestUnbindBeforeAdoption(t *testing.T) {
	for name, kind := range leftovers {
		for _, viaInstance := range []bool{false, true} {
			name := name
			if viaInstance {
				name += "/Deprovision"
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				ctx := context.Background()
				inst := h.provisioned(planStd)
				bid := newID()
				bind := inst + "/service_bindings/" + bid
				user := driver.UserName(h.prefix, "binding", bid)

				g := newGate()
				defer g.release()
				var calls atomic.Int32
				h.drv.hook("EnsureCredential", func(ctx context.Context) error {
					if calls.Add(1) > 1 {
						return nil
					}
					in := &iam.CreateUserInput{UserName: &user}
					if kind == otherMark {
						in.Tags = []iamtypes.Tag{{Key: aws.String(s3iam.OwnerTagKey), Value: aws.String(driver.OwnerMark("binding", "someone-else"))}}
					}
					if _, err := h.iam.CreateUser(ctx, in); err != nil {
						return err
					}
					if err := g.hold(ctx); err != nil {
						return err
					}
					return errDied
				})
				h.want(h.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind")
				g.waitEntered(t)

				rec, err := h.store.Get(ctx, engine.KindBinding, bid)
				if err != nil {
					t.Fatal(err)
				}
				if !rec.Bucket.UserAttempted {
					t.Fatal("the bind's create call is under way and the record has no userAttempted")
				}
				if kind == notAttempted {
					rec.Bucket.UserAttempted = false
					if err := h.store.Update(ctx, rec); err != nil {
						t.Fatal(err)
					}
				}
				before := userSnapshot(t, h.iam, user)

				if viaInstance {
					d := h.want(h.do("DELETE", del(inst, planStd, true), nil), http.StatusAccepted, "deprovision")
					// The create call dies only once the deprovision has
					// turned the bind into an unbind: else the bind would
					// retry, adopt the user and end before the revoke.
					waitUnbind(t, h, bid)
					g.release()
					if s := h.waitOp(inst, d.str("operation")); s != "succeeded" {
						t.Fatalf("deprovision ended %q, want succeeded", s)
					}
				} else {
					d := h.want(h.do("DELETE", del(bind, planStd, true), nil), http.StatusAccepted, "unbind")
					g.release()
					if s := h.waitOp(bind, d.str("operation")); s != "succeeded" {
						t.Fatalf("unbind ended %q, want succeeded", s)
					}
				}
				rec, err = h.store.Get(ctx, engine.KindBinding, bid)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Phase != engine.PhaseDeleted || rec.Bucket.UserAttempted || rec.Bucket.AccessKeyID != "" || len(rec.SealedSecret) != 0 {
					t.Errorf("the binding's record is %s with userAttempted %v and key %q, want deleted, false and none",
						rec.Phase, rec.Bucket.UserAttempted, rec.Bucket.AccessKeyID)
				}
				if kind == unmarked {
					if keys, ok := h.users()[user]; ok {
						t.Errorf("the unmarked user %s of an attempted bind is left, with keys %v", user, keys)
					}
					return
				}
				if _, ok := h.users()[user]; !ok {
					t.Fatalf("user %s, not the binding's, was deleted", user)
				}
				if diff := cmp.Diff(before, userSnapshot(t, h.iam, user)); diff != "" {
					t.Errorf("the user that is not the binding's changed (-before +after):\n%s", diff)
				}
			})
		}
	}
}

// waitUnbind waits until the binding's record holds an unbind.
func waitUnbind(t *testing.T, h *harness, bid string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := h.store.Get(context.Background(), engine.KindBinding, bid)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Op.Type == engine.OpUnbind {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("binding %s never turned to an unbind", bid)
}

// bucketTags returns the bucket's tags as the root keys see them.
func bucketTags(t *testing.T, h *harness, bucket string) map[string]string {
	t.Helper()
	tags := map[string]string{}
	out, err := h.s3.GetBucketTagging(context.Background(), &s3.GetBucketTaggingInput{Bucket: &bucket})
	if err != nil {
		return tags // no tag set
	}
	for _, tag := range out.TagSet {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	return tags
}
