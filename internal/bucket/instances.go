package bucket

import (
	"context"
	"errors"
	"fmt"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Provision creates the instance's bucket with the owner mark, its labels
// as tags and the plan's versioning and quota, after a look recorded before the first
// create attempt (internal/ensure).
func (b *Backend) Provision(ctx context.Context, w *engine.Work) error {
	if w.Rec.Bucket == nil {
		return w.Finish(ctx, errNoState)
	}
	rec, s := w.Rec, w.Rec.Bucket
	var p instanceParams
	if err := decodeParams(rec.Request.Parameters, &p); err != nil {
		return w.Finish(ctx, fmt.Errorf("stored parameters: %w", err))
	}
	if !s.BucketAttempted {
		// Look before the first create attempt, and record it (internal/ensure).
		v, err := b.look(ctx, w, "observe bucket", ensure.Names{Bucket: s.Bucket, Owner: s.Owner})
		if err != nil {
			return w.Fail(ctx, err)
		}
		if !v.BucketFree {
			return w.Finish(ctx, engine.Mark(fmt.Errorf("bucket %q exists and is not this instance's: %w", s.Bucket, driver.ErrOwnedByOther), engine.ErrNotOurs))
		}
		s.BucketAttempted = true
		if err := w.Save(ctx); err != nil {
			return err
		}
	}
	err := step(ctx, w, "create bucket", func(ctx context.Context) error {
		return ensure.Bucket(ctx, b.driver, driver.BucketSpec{Name: s.Bucket, Owner: s.Owner, Tags: p.Labels,
			Versioning: b.versioning(rec.Request), Quota: b.quota(rec.Request)}, bucketCreation(s))
	})
	if errors.Is(err, engine.ErrRefused) {
		// Refused for good, perhaps after the bucket was created (S3
		// creates, then tags, then turns on versioning): the platform
		// hears a client error and will not clean up, so remove it.
		return b.removeRefused(ctx, w, err)
	}
	if err != nil {
		return w.Fail(ctx, err)
	}
	crashpoint.Hit(crashpoint.ProvisionBucketCreated)
	return finish(ctx, w, nil)
}

// Update applies the target's labels and the plan's versioning and quota
// to the bucket.
func (b *Backend) Update(ctx context.Context, w *engine.Work) error {
	if w.Rec.Bucket == nil {
		return w.Finish(ctx, errNoState)
	}
	rec, s := w.Rec, w.Rec.Bucket
	target := rec.Op.Target
	if target == nil {
		return w.Finish(ctx, errors.New("update without a target"))
	}
	var p instanceParams
	if err := decodeParams(target.Parameters, &p); err != nil {
		return w.Finish(ctx, fmt.Errorf("stored parameters: %w", err))
	}
	// A provisioned bucket carries our mark: an update adopts nothing, and
	// fails on a bucket whose mark was removed (ensure.ErrMarkLost).
	err := step(ctx, w, "update bucket", func(ctx context.Context) error {
		return ensure.Bucket(ctx, b.driver, driver.BucketSpec{Name: s.Bucket, Owner: s.Owner, Tags: p.Labels,
			Versioning: b.versioning(*target), Quota: b.quota(*target)}, ensure.Created)
	})
	if err != nil {
		return w.Fail(ctx, err)
	}
	return finish(ctx, w, nil)
}

// Deprovision revokes the instance's bindings (each through its own
// worker), then deletes the bucket if the record says it may be ours.
func (b *Backend) Deprovision(ctx context.Context, w *engine.Work) error {
	if w.Rec.Bucket == nil {
		return w.Finish(ctx, errNoState)
	}
	rec, s := w.Rec, w.Rec.Bucket
	if err := w.RevokeBindings(ctx); err != nil {
		return w.Fail(ctx, err)
	}
	crashpoint.Hit(crashpoint.DeprovisionBindingsRevoked)
	if s.BucketAttempted {
		purge, err := b.purgeOnDelete(rec)
		if err != nil {
			return w.Finish(ctx, err)
		}
		err = step(ctx, w, "delete bucket", func(ctx context.Context) error {
			ctx, stopped := purgeProgress(ctx, w, s.Bucket)
			err := ensure.DeleteBucket(ctx, b.driver, s.Bucket, s.Owner, purge, bucketCreation(s))
			if serr := stopped(); serr != nil {
				return serr
			}
			return err
		})
		if errors.Is(err, driver.ErrOwnedByOther) {
			// Another owner's mark, on a bucket this instance never
			// created: never deleted, not ours to clean.
			w.Logger().Warn("Bucket is not this instance's; left in place", "id", rec.ID, "bucket", s.Bucket)
			err = nil
		}
		if errors.Is(err, ensure.ErrMarkLost) {
			err = fmt.Errorf("%w; nothing was deleted: put the owner mark back, or delete the bucket yourself, then deprovision again", err)
		}
		if errors.Is(err, driver.ErrBucketNotEmpty) {
			// The driver's text says what the bucket holds; the advice
			// says what to do about it.
			err = fmt.Errorf("%w: delete its objects, or update the instance with {\"purge_on_delete\": true}, then deprovision again", err)
		}
		if err != nil {
			return w.Fail(ctx, err)
		}
		crashpoint.Hit(crashpoint.DeprovisionBucketDeleted)
	}
	return finish(ctx, w, nil)
}

// versioning reports whether req's plan keeps object versions. A plan
// removed from the catalog since asks for nothing: the driver then leaves
// versioning as it is, which is all it could do anyway.
func (b *Backend) versioning(req engine.Request) bool {
	plan, err := b.catalog.Lookup(req.ServiceID, req.PlanID)
	return err == nil && plan.Settings().Versioning
}

// quota is the limits of req's plan. A plan removed from the catalog since
// sets none: the bucket's limit is lifted at its next update, as a plan
// without a quota would have it.
func (b *Backend) quota(req engine.Request) driver.Quota {
	plan, err := b.catalog.Lookup(req.ServiceID, req.PlanID)
	if err != nil {
		return driver.Quota{}
	}
	size, objects := plan.Settings().Limits()
	return driver.Quota{MaxSize: size, MaxObjects: objects}
}

func (b *Backend) purgeOnDelete(rec *engine.Record) (bool, error) {
	var p instanceParams
	if err := decodeParams(rec.Request.Parameters, &p); err != nil {
		return false, fmt.Errorf("stored parameters: %w", err)
	}
	if p.PurgeOnDelete != nil {
		return *p.PurgeOnDelete, nil
	}
	plan, err := b.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID)
	if err != nil {
		return false, nil // a plan removed from the catalog: the safe default
	}
	return plan.Settings().PurgeOnDelete, nil
}

// removeRefused ends a provision the driver refused for good (refused
// wraps engine.ErrRefused), after deleting the bucket it may have created
// before the refusal. Only a bucket of ours is deleted: with our mark, or
// unmarked with the attempt recorded (marked first, as a deprovision does);
// never one with objects in it. If the deletion cannot be done by the
// deadline the provision still fails as refused, saying the bucket is
// left for the deprovision; if the worker is interrupted, the operation
// stays in progress and its next run is refused, and removes, again.
func (b *Backend) removeRefused(ctx context.Context, w *engine.Work, refused error) error {
	rec, s := w.Rec, w.Rec.Bucket
	if !s.BucketAttempted {
		return w.Finish(ctx, refused)
	}
	err := step(ctx, w, "remove refused bucket", func(ctx context.Context) error {
		return ensure.DeleteBucket(ctx, b.driver, s.Bucket, s.Owner, false, bucketCreation(s))
	})
	if w.Interrupted(ctx, err) {
		return err
	}
	if err != nil {
		w.Logger().Warn("Cannot remove the bucket of a refused provision; a deprovision removes it", "id", rec.ID, "bucket", s.Bucket, "error", err)
		return w.Finish(ctx, fmt.Errorf("%w; its bucket %q is left until the instance is deprovisioned", refused, s.Bucket))
	}
	s.BucketAttempted = false // nothing of ours is left under the name
	return w.Finish(ctx, refused)
}

// look runs ensure.Look as a step: retried while the driver fails.
func (b *Backend) look(ctx context.Context, w *engine.Work, what string, n ensure.Names) (v ensure.Verdict, err error) {
	err = step(ctx, w, what, func(ctx context.Context) (err error) {
		v, err = ensure.Look(ctx, b.driver, n)
		return err
	})
	return v, err
}
