package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors a caller branches on. Drivers wrap them with context:
// fmt.Errorf("bucket %q: %w", name, driver.ErrOwnedByOther).
var (
	// ErrOwnedByOther means the resource exists but carries no owner mark, or
	// another owner's mark. The driver changed nothing.
	ErrOwnedByOther = errors.New("resource exists and is owned by someone else")
	// ErrBucketNotEmpty means a bucket could not be deleted because it holds
	// objects and the caller did not ask for a purge.
	ErrBucketNotEmpty = errors.New("bucket is not empty")
	// ErrInvalid means the backend refuses the request in a way no retry can
	// fix (an invalid name, an unsupported option such as versioning on a
	// server that has none).
	ErrInvalid = errors.New("invalid request for this backend")
	// ErrKeyGone is EnsureCredential's answer, with CredentialSpec
	// RequireKeepKey, when the KeepKeyID key is not live. The driver
	// changed nothing.
	ErrKeyGone = errors.New("the key to keep is gone")
)

// KeyLimitError is EnsureCredential's answer, with KeepOtherKeys, when the
// user's keys leave no room for a new one and none of them may be deleted
// (see CredentialSpec.EvictKeyIDs). KeyIDs are the user's keys as listed.
// It is not permanent: a caller that proves them unrecorded retries with
// them in EvictKeyIDs.
type KeyLimitError struct {
	UserName string
	KeyIDs   []string
}

func (e *KeyLimitError) Error() string {
	return fmt.Sprintf("user %q has as many keys as the backend allows (%s), none of them known to be unrecorded", e.UserName, strings.Join(e.KeyIDs, ", "))
}

// Permanent reports whether err is one that retrying cannot fix.
func Permanent(err error) bool {
	return errors.Is(err, ErrOwnedByOther) || errors.Is(err, ErrBucketNotEmpty) || errors.Is(err, ErrInvalid)
}

// Access is what a credential may do in its bucket.
type Access string

// Access modes a credential can be granted.
const (
	AccessReadWrite Access = "read-write"
	AccessReadOnly  Access = "read-only"
	AccessWriteOnly Access = "write-only"
)

// Valid reports whether a is a known access mode.
func (a Access) Valid() bool {
	switch a {
	case AccessReadWrite, AccessReadOnly, AccessWriteOnly:
		return true
	}
	return false
}

// BucketSpec describes the bucket EnsureBucket makes so.
type BucketSpec struct {
	// Name is the backend bucket name (see BucketName).
	Name string
	// Owner is the owner mark stored on the bucket.
	Owner string
	// Tags are extra tags (user labels) kept on the bucket beside the owner
	// mark. EnsureBucket replaces earlier extra tags with these.
	Tags map[string]string
	// AdoptUnmarked lets EnsureBucket adopt an existing bucket with no owner
	// mark at all, and mark it. Set it only with durable evidence that the
	// caller attempted the creation itself (the engine records, before its
	// first create attempt, that the name was free) and may have crashed
	// before marking it. A bucket carrying another owner's mark is never
	// adopted.
	AdoptUnmarked bool
	// Versioning makes EnsureBucket turn object versioning on (it keeps
	// every version of every object). When false, EnsureBucket leaves the
	// bucket's versioning as it is: S3 can only suspend versioning, never
	// turn it off, and the versions already kept stay until deleted, so
	// there is nothing false could promise. A backend that cannot keep
	// versions answers ErrInvalid, with the bucket created and marked but
	// not versioned.
	Versioning bool
}

// CredentialSpec describes the credential EnsureCredential makes so: one
// backend user, allowed Access to Bucket and nothing else, with exactly one
// live access key.
type CredentialSpec struct {
	// UserName is the backend user name (see UserName).
	UserName string
	// Owner is the owner mark stored on the user.
	Owner string
	// Bucket is the only bucket the credential may reach.
	Bucket string
	// Access is what the credential may do there.
	Access Access
	// KeepKeyID is the access key id the caller has durably recorded, or
	// empty. Every other key of the user is deleted: a key created by an
	// earlier call whose answer was lost (a crash) must not stay live.
	KeepKeyID string
	// KeepOtherKeys makes EnsureCredential leave the user's other keys
	// alone: it returns the KeepKeyID key when it is live, and otherwise
	// creates a new key beside the ones there are. The engine creates a
	// key so, records it, and only then calls again with KeepKeyID set to
	// delete the others: of two callers that overlap (a process paused
	// past its lease, a request a stalled server carries out late),
	// neither deletes the key the other recorded. drivertest checks it; a
	// driver that ignores it still works, with the overlap then guarded by
	// the engine's lease alone. A driver whose backend limits a user's
	// keys deletes none of the others to make room for the new one unless
	// they are in EvictKeyIDs: with no room, it fails with *KeyLimitError.
	KeepOtherKeys bool
	// EvictKeyIDs are keys the caller has proved nobody recorded (the
	// engine lists them from a KeyLimitError and then writes its record,
	// a compare-and-swap that no other holder has written since). With
	// KeepOtherKeys, a backend's limit on a user's keys lets only these,
	// oldest first, be deleted to make room for the new key.
	EvictKeyIDs []string
	// RequireKeepKey makes EnsureCredential, when the KeepKeyID key is not
	// live, delete nothing and fail with ErrKeyGone (without it, a new key
	// is made and every other deleted). The engine then makes a key beside
	// the others and records it before any is deleted, as for a missing
	// one. A driver that ignores it still works, as it did before.
	RequireKeepKey bool
	// AdoptUnmarked lets EnsureCredential adopt an existing user with no
	// owner mark at all: the user is marked (and given whatever else
	// creation sets), then treated as the caller's own, so its other keys
	// are deleted as above. It is for backends that mark a user in a
	// second call after creating it, where a crash in between leaves the
	// user unmarked. Set it only with durable evidence that the caller
	// attempted the creation itself (the engine records, before its first
	// attempt, that the name was free). A user carrying another owner's
	// mark is never adopted.
	AdoptUnmarked bool
}

// Credential is an access key pair.
type Credential struct {
	AccessKeyID string
	// SecretAccessKey is set only for a key created by this call. When the
	// kept key is still live it is empty: the caller already holds it.
	SecretAccessKey string
	// NewUser reports that this call created the user (the backend
	// refused nobody's create before it: the name was free) and then this
	// key on it, with the user's policy. No key on the user is older than
	// the user, so any other key it has was made after this call's create,
	// by another caller (or by a request of this call's the backend
	// carried out twice). False when the user existed, and from a driver
	// that cannot tell: the caller then deletes the other keys as for any
	// user (KeepKeyID). See internal/engine's bind for the use the engine
	// makes of it.
	NewUser bool
}

// Observation is what a driver sees of one bucket and one user.
type Observation struct {
	BucketExists bool
	// BucketOwner is the bucket's owner mark, empty when it has none.
	BucketOwner string
	UserExists  bool
	// UserOwner is the user's owner mark, empty when it has none.
	UserOwner string
	// KeyIDs are the access key ids of the user.
	KeyIDs []string
}

// ObserveRequest names what Observe looks at; either name may be empty.
type ObserveRequest struct {
	Bucket   string
	UserName string
}

// Driver is an object-storage backend. See the package documentation for the
// idempotency rules every method follows.
type Driver interface {
	// EnsureBucket creates the bucket if it is missing, adopts it if it
	// carries spec.Owner, and returns ErrOwnedByOther otherwise.
	EnsureBucket(ctx context.Context, spec BucketSpec) error
	// DeleteBucket deletes the bucket if it carries owner. A missing bucket is
	// success. A bucket with another mark, or none, is ErrOwnedByOther and is
	// left untouched. A non-empty bucket is emptied first when purge is set,
	// and is ErrBucketNotEmpty otherwise.
	DeleteBucket(ctx context.Context, name, owner string, purge bool) error
	// EnsureCredential makes the user, its bucket-scoped policy and exactly
	// one live key exist, and returns that key. A user with another mark,
	// or none (unless spec.AdoptUnmarked), is ErrOwnedByOther, untouched.
	EnsureCredential(ctx context.Context, spec CredentialSpec) (Credential, error)
	// RevokeCredential deletes the user's keys, policies and the user itself
	// if it carries owner. A missing user is success; another owner's user is
	// ErrOwnedByOther. A revoked key is rejected by the server at once.
	RevokeCredential(ctx context.Context, userName, owner string) error
	// Observe reports what exists, without changing anything. With both
	// names empty it only checks that the backend answers and accepts the
	// driver's credentials.
	Observe(ctx context.Context, req ObserveRequest) (Observation, error)
}

// AtomicUserMarker is implemented by a driver that can tell whether the
// backend keeps a new user's owner mark in the same write that creates the
// user. It is optional: a driver without it is taken to mark a user in a
// second call, where a crash in between leaves a user of the caller's own
// without a mark (see CredentialSpec.AdoptUnmarked and internal/ensure).
type AtomicUserMarker interface {
	// AtomicUserMarks reports whether no user this driver creates can be
	// left without its owner mark, whatever crashes: so an unmarked user
	// under a caller's name was never the caller's. True only once the
	// driver knows it (it has seen the backend keep the mark, or is
	// configured so); false before, and false from the moment it has seen
	// the backend drop it. It makes no backend call.
	AtomicUserMarks() bool
}
