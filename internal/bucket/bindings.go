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

// attemptUser looks at the binding's user name before the bind's first
// attempt to create the user and records the attempt, unless the record
// holds it already or no look is needed: where the backend marks a new
// user in the same write, an unmarked user under the name is someone
// else's, and EnsureCredential without the attempt refuses it
// (internal/ensure). ended reports that the bind is over (the name is
// taken, or the look or the write failed); err is then bind's answer.
func (b *Backend) attemptUser(ctx context.Context, w *engine.Work) (ended bool, err error) {
	s := w.Rec.Bucket
	if s.UserAttempted || !ensure.UserLookNeeded(b.driver) {
		return false, nil
	}
	v, err := b.look(ctx, w, "observe user", ensure.Names{User: s.UserName, Owner: s.Owner})
	if err != nil {
		return true, w.Fail(ctx, err)
	}
	if !v.UserFree {
		return true, finish(ctx, w, fmt.Errorf("user %q exists and is not this binding's: %w", s.UserName, driver.ErrOwnedByOther))
	}
	s.UserAttempted = true
	if err := w.Save(ctx); err != nil {
		return true, err
	}
	return false, nil
}

// Bind makes the binding's user, scoped to its instance's bucket, and one
// key, recorded (sealed) before anyone is given it; any other key of the
// user is deleted once it is.
func (b *Backend) Bind(ctx context.Context, w *engine.Work) error {
	if w.Rec.Bucket == nil {
		return w.Finish(ctx, errNoState)
	}
	rec, s := w.Rec, w.Rec.Bucket
	if ended, err := b.attemptUser(ctx, w); ended {
		return err
	}
	// The overlap rule (internal/ensure): a key is created beside any
	// others, recorded, and only then are the others deleted. Of two
	// holders that overlap (one paused past its lease, or a request a
	// stalled server carries out late), one records its key first; the
	// other sees it and keeps it, or fails to record its own
	// (compare-and-swap) and deletes only that.
	for round := 1; ; round++ {
		if s.AccessKeyID == "" || len(rec.SealedSecret) == 0 {
			cred, err := b.newKey(ctx, w)
			if err != nil {
				return b.bindFailed(ctx, w, err)
			}
			if cred.SecretAccessKey == "" {
				return finish(ctx, w, fmt.Errorf("driver returned key %q without its secret", cred.AccessKeyID))
			}
			// A new key: record it before anyone is told about it. If we
			// crash before this write, the resumed bind makes another and
			// deletes this one with the rest.
			crashpoint.Hit(crashpoint.BindKeyCreated)
			if err := b.sealKey(w, cred); err != nil {
				return finish(ctx, w, err)
			}
			if cred.NewUser {
				return b.recordNewUserKey(ctx, w, cred.AccessKeyID)
			}
			if err := w.Save(ctx); err != nil {
				b.dropKey(ctx, w, cred.AccessKeyID)
				return err
			}
			crashpoint.Hit(crashpoint.BindKeyRecorded)
		}
		// The record holds the key: now it is made the only one. If it is
		// gone (deleted behind this bind's back), nothing is deleted: a
		// key is made beside the others and recorded first, as when none
		// was recorded.
		cred, err := b.onlyKey(ctx, w)
		if errors.Is(err, driver.ErrKeyGone) {
			if round >= 3 {
				return w.Fail(ctx, fmt.Errorf("the recorded key %q was deleted behind this bind's back %d times", s.AccessKeyID, round))
			}
			w.Logger().Warn("The recorded key is gone; making another beside the others", "kind", rec.Kind, "id", rec.ID, "key_id", s.AccessKeyID)
			s.AccessKeyID, rec.SealedSecret = "", nil
			continue
		}
		if err != nil {
			return b.bindFailed(ctx, w, err)
		}
		return finish(ctx, w, b.keptKey(w, cred))
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
//     the user existing, so NewUser was false) deletes the other keys;
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
func (b *Backend) recordNewUserKey(ctx context.Context, w *engine.Work, keyID string) error {
	if err := finish(ctx, w, nil); err != nil {
		b.dropKey(ctx, w, keyID)
		return err
	}
	crashpoint.Hit(crashpoint.BindKeyRecorded)
	return nil
}

// newKey makes a key beside the user's others (driver.AddKey), in a step.
// When the user has no room for one, the driver deletes none it cannot
// know unrecorded. The keys it listed are: this holder's record write
// succeeds only if nobody wrote the record since this holder read it
// without a key, and a holder that takes the lease later makes its keys
// after the listing. A holder that lost its lease stops at that write
// (ErrStale) and deletes none.
func (b *Backend) newKey(ctx context.Context, w *engine.Work) (cred driver.Credential, err error) {
	s := w.Rec.Bucket
	err = step(ctx, w, "create credential", func(ctx context.Context) (err error) {
		spec := driver.CredentialSpec{
			UserName: s.UserName, Owner: s.Owner, Bucket: s.Bucket,
			Access: driver.Access(s.Access), Keys: driver.AddKey,
		}
		cred, err = ensure.Credential(ctx, b.driver, spec, userCreation(s))
		var full *driver.KeyLimitError
		if !errors.As(err, &full) {
			return err
		}
		if err := w.Save(ctx); err != nil {
			return err
		}
		for _, id := range full.KeyIDs {
			if id != s.AccessKeyID {
				spec.Evict = append(spec.Evict, id)
			}
		}
		cred, err = ensure.Credential(ctx, b.driver, spec, userCreation(s))
		return err
	})
	return cred, err
}

// onlyKey makes the recorded key the user's only one (driver.KeepOnlyKey),
// in a step. When it is gone, nothing is deleted and the answer is
// driver.ErrKeyGone.
func (b *Backend) onlyKey(ctx context.Context, w *engine.Work) (cred driver.Credential, err error) {
	s := w.Rec.Bucket
	gone := false
	err = step(ctx, w, "delete other keys", func(ctx context.Context) (err error) {
		cred, err = ensure.Credential(ctx, b.driver, driver.CredentialSpec{
			UserName: s.UserName, Owner: s.Owner, Bucket: s.Bucket,
			Access: driver.Access(s.Access), Keys: driver.KeepOnlyKey, KeyID: s.AccessKeyID,
		}, userCreation(s))
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

// keptKey checks the answer of onlyKey against the record: KeepOnlyKey
// answers the recorded key, without its secret, or ErrKeyGone.
func (b *Backend) keptKey(w *engine.Work, cred driver.Credential) error {
	s := w.Rec.Bucket
	if cred.AccessKeyID != s.AccessKeyID || cred.SecretAccessKey != "" {
		return fmt.Errorf("driver answered key %q (secret set %v) where the record holds %q to keep", cred.AccessKeyID, cred.SecretAccessKey != "", s.AccessKeyID)
	}
	return nil
}

// sealKey puts cred, sealed, into the record (not written).
func (b *Backend) sealKey(w *engine.Work, cred driver.Credential) error {
	s := w.Rec.Bucket
	if err := w.SealCredentials([]byte(cred.SecretAccessKey)); err != nil {
		return err
	}
	s.AccessKeyID = cred.AccessKeyID
	return nil
}

// bindFailed ends or retries a bind whose EnsureCredential failed. A
// refusal for good is handled as for a refused bucket: the user (and a key)
// may exist by now, and nobody would ever revoke them.
func (b *Backend) bindFailed(ctx context.Context, w *engine.Work, err error) error {
	if errors.Is(err, driver.ErrInvalid) {
		return b.revokeRefused(ctx, w, err)
	}
	return w.Fail(ctx, err)
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
func (b *Backend) dropKey(ctx context.Context, w *engine.Work, keyID string) {
	rec, s := w.Rec, w.Rec.Bucket
	a, ok := b.driver.(driver.Auditable)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.CallTimeout())
	defer cancel()
	cur, err := w.Stored(ctx)
	if err == nil && cur.Bucket != nil && cur.Bucket.AccessKeyID == keyID {
		return // recorded after all
	}
	switch {
	case err == nil && cur.Phase == engine.PhaseDeleted:
		// Unbound meanwhile: this call may have made the user again
		// (the unbind found none, or revoked it before). The key goes,
		// and the user only if no key is left: the same binding id may
		// have been bound again since the read, and that bind's user and
		// key are not this holder's to delete.
		if err = a.DeleteAccessKey(ctx, s.UserName, s.Owner, keyID); err != nil {
			break
		}
		var obs driver.Observation
		obs, err = b.driver.Observe(ctx, driver.ObserveRequest{UserName: s.UserName})
		if err == nil && obs.UserExists && obs.UserOwner == s.Owner && len(obs.KeyIDs) == 0 {
			err = b.driver.RevokeCredential(ctx, s.UserName, s.Owner)
		}
	case err == nil:
		err = a.DeleteAccessKey(ctx, s.UserName, s.Owner, keyID)
	}
	if err != nil {
		w.Logger().Warn("Cannot delete a key this replica made but could not record; the leak audit reports it", "kind", rec.Kind, "id", rec.ID, "key_id", keyID, "error", err)
		return
	}
	w.Logger().Info("Deleted a key this replica made but could not record", "kind", rec.Kind, "id", rec.ID, "key_id", keyID)
}

// Unbind revokes the binding's user and its keys, if the record says the
// user may be ours.
func (b *Backend) Unbind(ctx context.Context, w *engine.Work) error {
	if w.Rec.Bucket == nil {
		return w.Finish(ctx, errNoState)
	}
	rec, s := w.Rec, w.Rec.Bucket
	err := step(ctx, w, "revoke credential", func(ctx context.Context) error {
		return ensure.RevokeUser(ctx, b.driver, s.UserName, s.Owner, s.Bucket, userCreation(s))
	})
	if errors.Is(err, driver.ErrOwnedByOther) {
		// Never deleted: not ours (another owner's mark, or no mark and
		// no attempt recorded, on a user this binding never created).
		w.Logger().Warn("Backend user is not this binding's, or is not marked; left in place", "id", rec.ID, "user", s.UserName)
		err = nil
	}
	if errors.Is(err, ensure.ErrMarkLost) {
		err = fmt.Errorf("%w; nothing was deleted: put the owner mark back, or delete the user yourself, then unbind again", err)
	}
	if err != nil {
		return w.Fail(ctx, err)
	}
	// Nothing of ours is left under the name: the user is gone, or what
	// is there is someone else's. A bind of this id again looks first.
	s.UserAttempted, s.UserCreated = false, false
	crashpoint.Hit(crashpoint.UnbindUserRevoked)
	return finish(ctx, w, nil)
}

// revokeRefused is removeRefused for a bind: it revokes the user (and any
// key) a refused EnsureCredential may have left, then ends the bind. Without
// the attempt recorded (the backend marks a new user in the same write, so
// the bind did not look) what the call made carries the binding's mark, and
// only such a user is revoked; an unmarked one is someone else's and stays.
func (b *Backend) revokeRefused(ctx context.Context, w *engine.Work, refused error) error {
	rec, s := w.Rec, w.Rec.Bucket
	err := step(ctx, w, "revoke refused credential", func(ctx context.Context) error {
		return ensure.RevokeUser(ctx, b.driver, s.UserName, s.Owner, s.Bucket, userCreation(s))
	})
	if w.Interrupted(ctx, err) {
		return err
	}
	if !s.UserAttempted && errors.Is(err, driver.ErrOwnedByOther) {
		err = nil // not this binding's: left in place, nothing of ours there
	}
	if err != nil {
		w.Logger().Warn("Cannot revoke the user of a refused bind; an unbind revokes it", "id", rec.ID, "user", s.UserName, "error", err)
		return finish(ctx, w, fmt.Errorf("%w; its user %q is left until the binding is unbound", refused, s.UserName))
	}
	s.UserAttempted = false
	s.AccessKeyID, rec.SealedSecret = "", nil
	return finish(ctx, w, refused)
}
