package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// giveUp marks an error that ends the operation (permanent, or past the
// deadline) as opposed to one that only interrupts the worker.
type giveUp struct{ err error }

func (g giveUp) Error() string { return g.err.Error() }
func (g giveUp) Unwrap() error { return g.err }

// step runs one idempotent backend call, retrying transient errors with
// exponential backoff and full jitter until the operation's deadline. While
// it retries, the operation's description says why, for pollers.
func (e *Engine) step(ctx context.Context, rec *Record, what string, call func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if e.halted(ctx) {
			return errHalted
		}
		if err := e.renew(ctx, rec); err != nil {
			return err
		}
		// Shorter than the lease: a call cut off when the lease is lost
		// has ended before another replica may take over.
		cctx, cancel := context.WithTimeout(ctx, e.callTO)
		err := call(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if e.halted(ctx) {
			return errHalted
		}
		if errors.Is(err, ErrStale) {
			// A write within the call was refused: another holder
			// wrote the record, and this one must do nothing more.
			return err
		}
		if driver.Permanent(err) || errors.Is(err, ensure.ErrMarkLost) {
			return giveUp{fmt.Errorf("%s: %w", what, err)}
		}
		if time.Now().After(rec.Op.Deadline) {
			return giveUp{fmt.Errorf("%s: gave up after %d attempts at the operation deadline: %w", what, attempt, err)}
		}
		desc := retrying(what, err)
		if rec.Op.Description != desc {
			rec.Op.Description = desc
			if err := e.save(ctx, rec); err != nil {
				return err
			}
		}
		e.metrics.retries.WithLabelValues(what).Inc()
		e.log.Warn("Backend call failed; retrying", "kind", rec.Kind, "id", rec.ID, "step", what, "attempt", attempt, "error", err)
		e.sleep(ctx, retryWait(rand.N(backoff), time.Until(rec.Op.Deadline)))
		backoff = min(2*backoff, 30*time.Second)
	}
}

// retryWait is how long a step waits before its next attempt: the drawn
// backoff, but never past the operation's deadline (left is the time to
// it), so that the last attempt runs at the deadline and a failure then
// ends the operation. A wait drawn past it (the backoff grows to 30 s)
// kept a failed operation in progress that long after its deadline, and a
// synchronous request, which waits a few seconds beyond the deadline,
// was answered "still in progress" instead of the failure.
func retryWait(drawn, left time.Duration) time.Duration {
	return min(drawn, max(left, 0)) + time.Millisecond
}

// fail ends the operation with err, unless err only means the worker was
// interrupted or superseded: then the operation stays as it is.
func (e *Engine) fail(ctx context.Context, rec *Record, err error) error {
	var g giveUp
	if errors.As(err, &g) || (!e.halted(ctx) && !errors.Is(err, ErrStale) && !errors.Is(err, errHalted) && !errors.Is(err, context.Canceled)) {
		return e.finish(ctx, rec, err)
	}
	return err
}

// finish ends the record's operation: with success when err is nil, with
// failure otherwise, and moves the record to the phase that follows.
func (e *Engine) finish(ctx context.Context, rec *Record, err error) error {
	op := &rec.Op
	op.EndedAt = time.Now().UTC()
	if err == nil {
		op.State, op.Description = OpSucceeded, string(op.Type)+" succeeded"
	} else {
		op.State, op.Description = OpFailed, fmt.Sprintf("%s failed: %s", op.Type, described(err))
		// The backend refused the request for good (an invalid tag, an
		// option it does not have): the request's fault, not ours, and
		// answered so (422), never as the broker's own failure (500).
		op.Refused = errors.Is(err, driver.ErrInvalid)
	}
	ok := err == nil
	switch op.Type {
	case OpProvision, OpBind:
		rec.Phase = pick(ok, PhaseReady, PhaseFailed)
		if ok && rec.Upstream == "" {
			// The bucket or user is there with our mark: from now on a
			// missing mark is someone's change (internal/ensure).
			rec.BucketCreated = rec.BucketCreated || rec.Kind == KindInstance
			rec.UserCreated = rec.UserCreated || rec.Kind == KindBinding
		}
	case OpUpdate:
		rec.Phase = PhaseReady // a failed update leaves the instance as it was
		if ok && op.Target != nil {
			rec.Request = *op.Target
		}
	case OpDeprovision, OpUnbind:
		rec.Phase = pick(ok, PhaseDeleted, PhaseFailed)
		if ok {
			rec.SealedSecret = nil // never keep the secret of a revoked key
		}
	default:
		rec.Phase = PhaseFailed
	}
	return e.save(ctx, rec)
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

func (e *Engine) provision(ctx context.Context, rec *Record) error {
	var p instanceParams
	if err := decodeParams(rec.Request.Parameters, &p); err != nil {
		return e.finish(ctx, rec, fmt.Errorf("stored parameters: %w", err))
	}
	if !rec.BucketAttempted {
		// Look before the first create attempt, and record it (internal/ensure).
		v, err := e.look(ctx, rec, "observe bucket", ensure.Names{Bucket: rec.Bucket, Owner: rec.Owner})
		if err != nil {
			return e.fail(ctx, rec, err)
		}
		if !v.BucketFree {
			return e.finish(ctx, rec, fmt.Errorf("bucket %q exists and is not this instance's: %w", rec.Bucket, driver.ErrOwnedByOther))
		}
		rec.BucketAttempted = true
		if err := e.save(ctx, rec); err != nil {
			return err
		}
	}
	err := e.step(ctx, rec, "create bucket", func(ctx context.Context) error {
		return ensure.Bucket(ctx, e.driver, driver.BucketSpec{Name: rec.Bucket, Owner: rec.Owner, Tags: p.Labels,
			Versioning: e.versioning(rec.Request)}, rec.bucketCreation())
	})
	if errors.Is(err, driver.ErrInvalid) {
		// Refused for good, perhaps after the bucket was created (S3
		// creates, then tags, then turns on versioning): the platform
		// hears a client error and will not clean up, so remove it.
		return e.removeRefused(ctx, rec, err)
	}
	if err != nil {
		return e.fail(ctx, rec, err)
	}
	crashpoint.Hit(crashpoint.ProvisionBucketCreated)
	return e.finish(ctx, rec, nil)
}

func (e *Engine) update(ctx context.Context, rec *Record) error {
	target := rec.Op.Target
	if target == nil {
		return e.finish(ctx, rec, errors.New("update without a target"))
	}
	var p instanceParams
	if err := decodeParams(target.Parameters, &p); err != nil {
		return e.finish(ctx, rec, fmt.Errorf("stored parameters: %w", err))
	}
	// A provisioned bucket carries our mark: an update adopts nothing, and
	// fails on a bucket whose mark was removed (ensure.ErrMarkLost).
	err := e.step(ctx, rec, "update bucket", func(ctx context.Context) error {
		return ensure.Bucket(ctx, e.driver, driver.BucketSpec{Name: rec.Bucket, Owner: rec.Owner, Tags: p.Labels,
			Versioning: e.versioning(*target)}, ensure.Created)
	})
	if err != nil {
		return e.fail(ctx, rec, err)
	}
	return e.finish(ctx, rec, nil)
}

func (e *Engine) deprovision(ctx context.Context, rec *Record) error {
	if err := e.revokeBindings(ctx, rec); err != nil {
		return e.fail(ctx, rec, err)
	}
	crashpoint.Hit(crashpoint.DeprovisionBindingsRevoked)
	if rec.BucketAttempted {
		purge, err := e.purgeOnDelete(rec)
		if err != nil {
			return e.finish(ctx, rec, err)
		}
		err = e.step(ctx, rec, "delete bucket", func(ctx context.Context) error {
			return ensure.DeleteBucket(ctx, e.driver, rec.Bucket, rec.Owner, purge, rec.bucketCreation())
		})
		if errors.Is(err, driver.ErrOwnedByOther) {
			// Another owner's mark, on a bucket this instance never
			// created: never deleted, not ours to clean.
			e.log.Warn("Bucket is not this instance's; left in place", "id", rec.ID, "bucket", rec.Bucket)
			err = nil
		}
		if errors.Is(err, ensure.ErrMarkLost) {
			err = giveUp{fmt.Errorf("%w; nothing was deleted: put the owner mark back, or delete the bucket yourself, then deprovision again", err)}
		}
		if errors.Is(err, driver.ErrBucketNotEmpty) {
			// The driver's text says what the bucket holds; the advice
			// says what to do about it.
			err = giveUp{fmt.Errorf("%w: delete its objects, or update the instance with {\"purge_on_delete\": true}, then deprovision again", err)}
		}
		if err != nil {
			return e.fail(ctx, rec, err)
		}
		crashpoint.Hit(crashpoint.DeprovisionBucketDeleted)
	}
	return e.finish(ctx, rec, nil)
}

// versioning reports whether req's plan keeps object versions. A plan
// removed from the catalog since asks for nothing: the driver then leaves
// versioning as it is, which is all it could do anyway.
func (e *Engine) versioning(req Request) bool {
	plan, err := e.catalog.Lookup(req.ServiceID, req.PlanID)
	return err == nil && plan.Settings().Versioning
}

func (e *Engine) purgeOnDelete(rec *Record) (bool, error) {
	var p instanceParams
	if err := decodeParams(rec.Request.Parameters, &p); err != nil {
		return false, fmt.Errorf("stored parameters: %w", err)
	}
	if p.PurgeOnDelete != nil {
		return *p.PurgeOnDelete, nil
	}
	plan, err := e.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID)
	if err != nil {
		return false, nil // a plan removed from the catalog: the safe default
	}
	return plan.Settings().PurgeOnDelete, nil
}

// revokeBindings turns every live binding of the instance into an unbind
// and waits until all are deleted. Each binding's own worker revokes it, so
// a bind still running is halted before its credential is revoked.
func (e *Engine) revokeBindings(ctx context.Context, inst *Record) error {
	poll := 20 * time.Millisecond
	for {
		bindings, err := e.store.List(ctx, ListOptions{Kind: KindBinding, InstanceID: inst.ID})
		if err != nil {
			return err
		}
		pending, failed := 0, 0
		for _, b := range bindings {
			if b.Phase == PhaseDeleted {
				continue
			}
			pending++
			switch {
			case b.Op.Type == OpUnbind && !b.Op.Finished():
				e.kick(KindBinding, b.ID)
			case b.Op.Type == OpUnbind && b.Op.State == OpFailed:
				failed++
				fallthrough
			default:
				// The deprovision's originating identity: the
				// platform user who caused this unbind.
				b.startOp(e.newOp(OpUnbind, true, inst.Op.Identity))
				b.Op.Deadline = inst.Op.Deadline
				b.Phase = PhaseDeprovisioning
				if err := e.save(ctx, b); err != nil && !errors.Is(err, ErrStale) {
					return err
				}
				e.interrupt(KindBinding, b.ID)
			}
		}
		// A binding the store cannot read is skipped by List, but its
		// user may hold a live key: wait for its repair, and say so.
		unreadable := e.unreadableBindings(inst.ID)
		pending += len(unreadable)
		if pending == 0 {
			return nil
		}
		if time.Now().After(inst.Op.Deadline) {
			if len(unreadable) > 0 {
				return giveUp{fmt.Errorf("%d of its bindings could not be revoked before the deadline (%d failed; %s cannot be read: repair with `bucketbroker admin records repair`, then deprovision again)",
					pending, failed, strings.Join(unreadable, ", "))}
			}
			return giveUp{fmt.Errorf("%d of its bindings could not be revoked before the deadline (%d failed)", pending, failed)}
		}
		if err := e.renew(ctx, inst); err != nil {
			return err
		}
		e.sleep(ctx, poll)
		if e.halted(ctx) {
			return errHalted
		}
		poll = min(2*poll, time.Second)
	}
}

// attemptUser looks at the binding's user name before the bind's first
// attempt to create the user and records the attempt, unless the record
// holds it already or no look is needed: where the backend marks a new
// user in the same write, an unmarked user under the name is someone
// else's, and EnsureCredential without the attempt refuses it
// (internal/ensure). ended reports that the bind is over (the name is
// taken, or the look or the write failed); err is then bind's answer.
func (e *Engine) attemptUser(ctx context.Context, rec *Record) (ended bool, err error) {
	if rec.UserAttempted || !ensure.UserLookNeeded(e.driver) {
		return false, nil
	}
	v, err := e.look(ctx, rec, "observe user", ensure.Names{User: rec.UserName, Owner: rec.Owner})
	if err != nil {
		return true, e.fail(ctx, rec, err)
	}
	if !v.UserFree {
		return true, e.finish(ctx, rec, fmt.Errorf("user %q exists and is not this binding's: %w", rec.UserName, driver.ErrOwnedByOther))
	}
	rec.UserAttempted = true
	if err := e.save(ctx, rec); err != nil {
		return true, err
	}
	return false, nil
}

func (e *Engine) bind(ctx context.Context, rec *Record) error {
	if ended, err := e.attemptUser(ctx, rec); ended {
		return err
	}
	// The overlap rule (internal/ensure): a key is created beside any
	// others, recorded, and only then are the others deleted. Of two
	// holders that overlap (one paused past its lease, or a request a
	// stalled server carries out late), one records its key first; the
	// other sees it and keeps it, or fails to record its own
	// (compare-and-swap) and deletes only that.
	for round := 1; ; round++ {
		if rec.AccessKeyID == "" || len(rec.SealedSecret) == 0 {
			cred, err := e.newKey(ctx, rec)
			if err != nil {
				return e.bindFailed(ctx, rec, err)
			}
			if cred.SecretAccessKey == "" {
				return e.finish(ctx, rec, fmt.Errorf("driver returned key %q without its secret", cred.AccessKeyID))
			}
			// A new key: record it before anyone is told about it. If we
			// crash before this write, the resumed bind makes another and
			// deletes this one with the rest.
			crashpoint.Hit(crashpoint.BindKeyCreated)
			if err := e.sealKey(rec, cred); err != nil {
				return e.finish(ctx, rec, err)
			}
			if cred.NewUser {
				return e.recordNewUserKey(ctx, rec, cred.AccessKeyID)
			}
			if err := e.save(ctx, rec); err != nil {
				e.dropKey(ctx, rec, cred.AccessKeyID)
				return err
			}
			crashpoint.Hit(crashpoint.BindKeyRecorded)
		}
		// The record holds the key: now it is made the only one. If it is
		// gone (deleted behind this bind's back), nothing is deleted: a
		// key is made beside the others and recorded first, as when none
		// was recorded.
		cred, err := e.onlyKey(ctx, rec)
		if errors.Is(err, driver.ErrKeyGone) {
			if round >= 3 {
				return e.fail(ctx, rec, fmt.Errorf("the recorded key %q was deleted behind this bind's back %d times", rec.AccessKeyID, round))
			}
			e.log.Warn("The recorded key is gone; making another beside the others", "kind", rec.Kind, "id", rec.ID, "key_id", rec.AccessKeyID)
			rec.AccessKeyID, rec.SealedSecret = "", nil
			continue
		}
		if err != nil {
			return e.bindFailed(ctx, rec, err)
		}
		return e.finish(ctx, rec, e.keptKey(rec, cred))
	}
}

// recordNewUserKey ends a bind whose key call created the user
// (driver.Credential.NewUser): the write that records the key also ends
// the operation, and no call deletes the user's other keys (onlyKey). It
// has none of this holder's, nor any made before this holder's create:
// the name was free until then. What onlyKey could still find is a key
// made since by a holder that overlaps this one (one that took the lease
// over while this one paused, or a stale one that resumed), or by a
// request of this holder's that the backend carried out twice (an SDK
// retry of a CreateAccessKey whose answer was lost). Each is a key whose
// secret nobody was ever answered:
//
//   - an overlapping holder answers only from the record, and its write
//     of its own key is a compare-and-swap against the version it read;
//     of the two writes one wins. If this one wins, the other's is refused
//     and that holder deletes its key itself (dropKey); if the other's
//     wins, this write is refused, this holder deletes its own key and
//     answers nothing, and the other holder's bind (its key call found
//     the user existing, so NewUser was false) deletes the rest;
//   - a key made by a request carried out twice was never seen by anyone.
//
// So skipping onlyKey neither deletes a key someone was given (it deletes
// nothing) nor gives one to two parties (the record holds one key). What
// it leaves: a losing holder that dies before its dropKey, or a doubled
// request, leaves a live key nobody holds until the binding is unbound
// (RevokeCredential deletes every key of the user); onlyKey would have
// deleted it only when the key was made before its listing, and a late
// request (a stalled server carrying a CreateAccessKey out after the
// listing) defeats it anyway. Such a key also takes one of IAM's two key
// places: a later key call of this binding (its recorded key deleted
// behind its back) that finds no room records the record first and
// evicts only the keys it proved unrecorded (newKey, KeyLimitError).
// One round trip of three requests and one record write fewer than the
// two-step path.
func (e *Engine) recordNewUserKey(ctx context.Context, rec *Record, keyID string) error {
	if err := e.finish(ctx, rec, nil); err != nil {
		e.dropKey(ctx, rec, keyID)
		return err
	}
	crashpoint.Hit(crashpoint.BindKeyRecorded)
	return nil
}

// newKey makes a key beside the user's others (KeepOtherKeys), in a step.
// When the user has no room for one, the driver deletes none it cannot
// know unrecorded. The keys it listed are: this holder's record write
// succeeds only if nobody wrote the record since this holder read it
// without a key, and a holder that takes the lease later makes its keys
// after the listing. A holder that lost its lease stops at that write
// (ErrStale) and deletes none.
func (e *Engine) newKey(ctx context.Context, rec *Record) (cred driver.Credential, err error) {
	err = e.step(ctx, rec, "create credential", func(ctx context.Context) (err error) {
		spec := driver.CredentialSpec{
			UserName: rec.UserName, Owner: rec.Owner, Bucket: rec.Bucket,
			Access: driver.Access(rec.Access), KeepOtherKeys: true,
		}
		cred, err = ensure.Credential(ctx, e.driver, spec, rec.userCreation())
		var full *driver.KeyLimitError
		if !errors.As(err, &full) {
			return err
		}
		if err := e.save(ctx, rec); err != nil {
			return err
		}
		for _, id := range full.KeyIDs {
			if id != rec.AccessKeyID {
				spec.EvictKeyIDs = append(spec.EvictKeyIDs, id)
			}
		}
		cred, err = ensure.Credential(ctx, e.driver, spec, rec.userCreation())
		return err
	})
	return cred, err
}

// onlyKey makes the recorded key the user's only one, in a step. When it
// is gone, nothing is deleted and the answer is driver.ErrKeyGone.
func (e *Engine) onlyKey(ctx context.Context, rec *Record) (cred driver.Credential, err error) {
	gone := false
	err = e.step(ctx, rec, "delete other keys", func(ctx context.Context) (err error) {
		cred, err = ensure.Credential(ctx, e.driver, driver.CredentialSpec{
			UserName: rec.UserName, Owner: rec.Owner, Bucket: rec.Bucket,
			Access: driver.Access(rec.Access), KeepKeyID: rec.AccessKeyID, RequireKeepKey: true,
		}, rec.userCreation())
		if gone = errors.Is(err, driver.ErrKeyGone); gone {
			return nil // not a backend failure: no retry
		}
		return err
	})
	if err == nil && gone {
		err = driver.ErrKeyGone
	}
	return cred, err
}

// keptKey checks the answer of onlyKey against the record. A driver that
// ignores RequireKeepKey replaced the gone key and deleted the others: the
// new key goes into the record, in the write that ends the operation.
func (e *Engine) keptKey(rec *Record, cred driver.Credential) error {
	if cred.SecretAccessKey != "" {
		return e.sealKey(rec, cred)
	}
	if cred.AccessKeyID != rec.AccessKeyID {
		return fmt.Errorf("driver kept key %q but the record holds %q", cred.AccessKeyID, rec.AccessKeyID)
	}
	return nil
}

// sealKey puts cred, sealed, into the record (not written).
func (e *Engine) sealKey(rec *Record, cred driver.Credential) error {
	sealed, err := e.box.Seal([]byte(cred.SecretAccessKey), sealContext(rec))
	if err != nil {
		return err
	}
	rec.AccessKeyID, rec.SealedSecret = cred.AccessKeyID, sealed
	return nil
}

// bindFailed ends or retries a bind whose EnsureCredential failed. A
// refusal for good is handled as for a refused bucket: the user (and a key)
// may exist by now, and nobody would ever revoke them.
func (e *Engine) bindFailed(ctx context.Context, rec *Record, err error) error {
	if errors.Is(err, driver.ErrInvalid) {
		return e.revokeRefused(ctx, rec, err)
	}
	return e.fail(ctx, rec, err)
}

// dropKey deletes a key this holder created but could not record (another
// holder wrote the record first, or this one lost its lease or its store):
// nobody holds it, and whoever recorded a key keeps that one. It is the
// only side effect of a holder that lost its lease, and it deletes only
// what that holder made: the key, and when the binding has been unbound
// meanwhile (the call may have made the user again) the user too if no key
// is left on it. A write that failed may still have been
// committed: the record is read first, and a key it holds is kept. What
// cannot be done here (the store or the backend fails, or the driver
// cannot delete one key) is left to the next bind of the binding or the
// leak audit.
func (e *Engine) dropKey(ctx context.Context, rec *Record, keyID string) {
	a, ok := e.driver.(driver.Auditable)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.callTO)
	defer cancel()
	cur, err := e.store.Get(ctx, rec.Kind, rec.ID)
	if err == nil && cur.AccessKeyID == keyID {
		return // recorded after all
	}
	switch {
	case err == nil && cur.Phase == PhaseDeleted:
		// Unbound meanwhile: this call may have made the user again
		// (the unbind found none, or revoked it before). The key goes,
		// and the user only if no key is left: the same binding id may
		// have been bound again since the read, and that bind's user and
		// key are not this holder's to delete.
		if err = a.DeleteAccessKey(ctx, rec.UserName, rec.Owner, keyID); err != nil {
			break
		}
		var obs driver.Observation
		obs, err = e.driver.Observe(ctx, driver.ObserveRequest{UserName: rec.UserName})
		if err == nil && obs.UserExists && obs.UserOwner == rec.Owner && len(obs.KeyIDs) == 0 {
			err = e.driver.RevokeCredential(ctx, rec.UserName, rec.Owner)
		}
	case err == nil:
		err = a.DeleteAccessKey(ctx, rec.UserName, rec.Owner, keyID)
	}
	if err != nil {
		e.log.Warn("Cannot delete a key this replica made but could not record; the leak audit reports it", "kind", rec.Kind, "id", rec.ID, "key_id", keyID, "error", err)
		return
	}
	e.log.Info("Deleted a key this replica made but could not record", "kind", rec.Kind, "id", rec.ID, "key_id", keyID)
}

func (e *Engine) unbind(ctx context.Context, rec *Record) error {
	err := e.step(ctx, rec, "revoke credential", func(ctx context.Context) error {
		return ensure.RevokeUser(ctx, e.driver, rec.UserName, rec.Owner, rec.Bucket, rec.userCreation())
	})
	if errors.Is(err, driver.ErrOwnedByOther) {
		// Never deleted: not ours (another owner's mark, or no mark and
		// no attempt recorded, on a user this binding never created).
		e.log.Warn("Backend user is not this binding's, or is not marked; left in place", "id", rec.ID, "user", rec.UserName)
		err = nil
	}
	if errors.Is(err, ensure.ErrMarkLost) {
		err = giveUp{fmt.Errorf("%w; nothing was deleted: put the owner mark back, or delete the user yourself, then unbind again", err)}
	}
	if err != nil {
		return e.fail(ctx, rec, err)
	}
	// Nothing of ours is left under the name: the user is gone, or what
	// is there is someone else's. A bind of this id again looks first.
	rec.UserAttempted, rec.UserCreated = false, false
	crashpoint.Hit(crashpoint.UnbindUserRevoked)
	return e.finish(ctx, rec, nil)
}

// removeRefused ends a provision the backend refused for good (refused
// wraps driver.ErrInvalid), after deleting the bucket it may have created
// before the refusal. Only a bucket of ours is deleted: with our mark, or
// unmarked with the attempt recorded (marked first, as a deprovision does);
// never one with objects in it. If the deletion cannot be done by the
// deadline the provision still fails as refused, saying the bucket is
// left for the deprovision; if the worker is interrupted, the operation
// stays in progress and its next run is refused, and removes, again.
func (e *Engine) removeRefused(ctx context.Context, rec *Record, refused error) error {
	if !rec.BucketAttempted {
		return e.finish(ctx, rec, refused)
	}
	err := e.step(ctx, rec, "remove refused bucket", func(ctx context.Context) error {
		return ensure.DeleteBucket(ctx, e.driver, rec.Bucket, rec.Owner, false, rec.bucketCreation())
	})
	if e.interrupted(ctx, err) {
		return err
	}
	if err != nil {
		e.log.Warn("Cannot remove the bucket of a refused provision; a deprovision removes it", "id", rec.ID, "bucket", rec.Bucket, "error", err)
		return e.finish(ctx, rec, fmt.Errorf("%w; its bucket %q is left until the instance is deprovisioned", refused, rec.Bucket))
	}
	rec.BucketAttempted = false // nothing of ours is left under the name
	return e.finish(ctx, rec, refused)
}

// revokeRefused is removeRefused for a bind: it revokes the user (and any
// key) a refused EnsureCredential may have left, then ends the bind. Without
// the attempt recorded (the backend marks a new user in the same write, so
// the bind did not look) what the call made carries the binding's mark, and
// only such a user is revoked; an unmarked one is someone else's and stays.
func (e *Engine) revokeRefused(ctx context.Context, rec *Record, refused error) error {
	err := e.step(ctx, rec, "revoke refused credential", func(ctx context.Context) error {
		return ensure.RevokeUser(ctx, e.driver, rec.UserName, rec.Owner, rec.Bucket, rec.userCreation())
	})
	if e.interrupted(ctx, err) {
		return err
	}
	if !rec.UserAttempted && errors.Is(err, driver.ErrOwnedByOther) {
		err = nil // not this binding's: left in place, nothing of ours there
	}
	if err != nil {
		e.log.Warn("Cannot revoke the user of a refused bind; an unbind revokes it", "id", rec.ID, "user", rec.UserName, "error", err)
		return e.finish(ctx, rec, fmt.Errorf("%w; its user %q is left until the binding is unbound", refused, rec.UserName))
	}
	rec.UserAttempted = false
	rec.AccessKeyID, rec.SealedSecret = "", nil
	return e.finish(ctx, rec, refused)
}

// interrupted reports whether err only means that the worker was halted,
// superseded or stopped (as fail tells them apart): the operation is not
// over, and must not be ended.
func (e *Engine) interrupted(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	var g giveUp
	return !errors.As(err, &g) && (e.halted(ctx) || errors.Is(err, ErrStale) || errors.Is(err, errHalted) || errors.Is(err, context.Canceled))
}

// look runs ensure.Look as a step: retried while the backend fails.
func (e *Engine) look(ctx context.Context, rec *Record, what string, n ensure.Names) (v ensure.Verdict, err error) {
	err = e.step(ctx, rec, what, func(ctx context.Context) (err error) {
		v, err = ensure.Look(ctx, e.driver, n)
		return err
	})
	return v, err
}

func sealContext(rec *Record) string { return "binding/" + rec.ID }
