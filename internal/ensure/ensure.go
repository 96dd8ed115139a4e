package ensure

import (
	"context"
	"errors"
	"fmt"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Names are the backend names a caller is about to create, with its owner
// mark. Either name may be empty: it is not looked at.
type Names struct {
	Bucket string
	User   string
	Owner  string
}

// Verdict is what Look found for each name it was asked about.
type Verdict struct {
	// BucketFree and UserFree report a name that is missing or already
	// carries the owner's mark: its attempt may be recorded. A name not
	// asked about is not free.
	BucketFree bool
	UserFree   bool
	// BucketOwner and UserOwner are the marks found on a name that is not
	// free; empty for a resource that carries none.
	BucketOwner string
	UserOwner   string
}

// Look observes the names, in one call and without changing anything,
// before the caller's first attempt to create them (see the package
// documentation): only a name it reports free may be recorded as
// attempted. With both names empty it makes no call.
func Look(ctx context.Context, d driver.Driver, n Names) (Verdict, error) {
	var v Verdict
	if n.Bucket == "" && n.User == "" {
		return v, nil
	}
	obs, err := d.Observe(ctx, driver.ObserveRequest{Bucket: n.Bucket, UserName: n.User})
	if err != nil {
		return v, err
	}
	if n.Bucket != "" {
		v.BucketFree = !obs.BucketExists || obs.BucketOwner == n.Owner
		if !v.BucketFree {
			v.BucketOwner = obs.BucketOwner
		}
	}
	if n.User != "" {
		v.UserFree = !obs.UserExists || obs.UserOwner == n.Owner
		if !v.UserFree {
			v.UserOwner = obs.UserOwner
		}
	}
	return v, nil
}

// UserLookNeeded reports whether a caller must look at a user name, and
// record the attempt, before its first attempt to create the user (see the
// package documentation). Not where the driver says the backend keeps a
// new user's owner mark in the same write (driver.AtomicUserMarker): there
// no user of the caller's is ever unmarked, so an unmarked user under the
// name is someone else's, which Credential without the attempt refuses
// (driver.ErrOwnedByOther) as the look would, and a user with the mark is
// the caller's with or without it. The caller then records no attempt.
func UserLookNeeded(d driver.Driver) bool {
	m, ok := d.(driver.AtomicUserMarker)
	return !ok || !m.AtomicUserMarks()
}

// Creation is what the caller's record says of its creation of a bucket
// or a user (see the package documentation).
type Creation uint8

const (
	// NotAttempted means the record holds no attempt to create it. An
	// unmarked resource under the name is someone else's.
	NotAttempted Creation = iota
	// Unconfirmed means the record holds the attempt and not its result (the
	// crash window between the create call and the write of its result,
	// or a create that failed). An unmarked resource under the name may be
	// the caller's own, and is adopted.
	Unconfirmed
	// Created means the record says it was created and marked. A resource
	// under the name without the caller's mark was changed by someone
	// since, and every step refuses it with ErrMarkLost.
	Created
)

// CreationOf is the Creation of a record that holds the attempt
// (attempted) and the result (created).
func CreationOf(attempted, created bool) Creation {
	switch {
	case created:
		return Created
	case attempted:
		return Unconfirmed
	}
	return NotAttempted
}

// ErrMarkLost is the answer of a step for a resource that the caller's
// record says it created and marked (Created) and that exists without the
// caller's mark: no mark, or another owner's. The step changed nothing.
var ErrMarkLost = errors.New("removed or replaced outside the broker")

func markLost(what, name, owner string) error {
	return fmt.Errorf("%s %q exists without owner mark %q, which it was created with: %w", what, name, owner, ErrMarkLost)
}

// Bucket makes spec so (driver.Driver.EnsureBucket), adopting an unmarked
// bucket under the name only while its creation is Unconfirmed, or, short
// of Created, with spec.AdoptUnmarked (other durable evidence that it is
// the caller's). Another owner's bucket is driver.ErrOwnedByOther; any
// bucket without the caller's mark is ErrMarkLost once Created.
func Bucket(ctx context.Context, d driver.Driver, spec driver.BucketSpec, c Creation) error {
	spec.AdoptUnmarked = c == Unconfirmed || (spec.AdoptUnmarked && c != Created)
	err := d.EnsureBucket(ctx, spec)
	if c == Created && errors.Is(err, driver.ErrOwnedByOther) {
		return markLost("bucket", spec.Name, spec.Owner)
	}
	return err
}

// Credential makes spec so (driver.Driver.EnsureCredential), adopting an
// unmarked user under the name only while its creation is Unconfirmed.
// Another owner's user is driver.ErrOwnedByOther; any user without the
// caller's mark is ErrMarkLost once Created.
func Credential(ctx context.Context, d driver.Driver, spec driver.CredentialSpec, c Creation) (driver.Credential, error) {
	spec.AdoptUnmarked = c == Unconfirmed
	cred, err := d.EnsureCredential(ctx, spec)
	if c == Created && errors.Is(err, driver.ErrOwnedByOther) {
		return cred, markLost("user", spec.UserName, spec.Owner)
	}
	return cred, err
}

// DeleteBucket deletes the bucket if it is the owner's: it carries the
// owner's mark, or it carries none and its creation is Unconfirmed (then it
// is marked first, and deleted). A missing bucket is success. Any other is
// left as it is: ErrMarkLost when Created, driver.ErrOwnedByOther
// otherwise. With purge, a bucket's objects are deleted with it; without,
// a non-empty bucket is driver.ErrBucketNotEmpty.
func DeleteBucket(ctx context.Context, d driver.Driver, name, owner string, purge bool, c Creation) error {
	err := d.DeleteBucket(ctx, name, owner, purge)
	if !errors.Is(err, driver.ErrOwnedByOther) {
		return err
	}
	switch c {
	case Created:
		return markLost("bucket", name, owner)
	case Unconfirmed:
		if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: owner, AdoptUnmarked: true}); err != nil {
			return fmt.Errorf("mark bucket %q before deleting it: %w", name, err)
		}
		return d.DeleteBucket(ctx, name, owner, purge)
	}
	return err
}

// RevokeUser deletes the user, its keys and policies if it is the owner's:
// it carries the owner's mark, or it carries none and its creation is
// Unconfirmed (then it is marked first, with a read-only key in bucket that
// nobody holds, and revoked). A missing user is success. Any other is left
// as it is: ErrMarkLost when Created, driver.ErrOwnedByOther otherwise.
func RevokeUser(ctx context.Context, d driver.Driver, user, owner, bucket string, c Creation) error {
	err := d.RevokeCredential(ctx, user, owner)
	if !errors.Is(err, driver.ErrOwnedByOther) {
		return err
	}
	switch c {
	case Created:
		return markLost("user", user, owner)
	case Unconfirmed:
		_, err = d.EnsureCredential(ctx, driver.CredentialSpec{
			UserName: user, Owner: owner, Bucket: bucket, Access: driver.AccessReadOnly,
			Keys: driver.ReplaceKeys, AdoptUnmarked: true,
		})
		if err != nil {
			return fmt.Errorf("mark user %q before revoking it: %w", user, err)
		}
		return d.RevokeCredential(ctx, user, owner)
	}
	return err
}
