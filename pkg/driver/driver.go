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
	// ErrKeyGone is EnsureCredential's answer in KeepOnlyKey mode when
	// the key to keep is not a live key of the user. No key was deleted.
	ErrKeyGone = errors.New("the key to keep is gone")
)

// KeyLimitError is EnsureCredential's answer in AddKey mode when the
// backend's limit on a user's keys leaves no room for a new one, even
// without the keys listed in CredentialSpec.Evict. KeyIDs are the user's
// keys as listed. No key was made, and none outside Evict deleted.
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
	// AdoptUnmarked lets EnsureBucket adopt an existing bucket with no
	// owner mark at all: it is marked, then treated as the caller's.
	AdoptUnmarked bool
	// Versioning makes EnsureBucket turn object versioning on (it keeps
	// every version of every object). When false, EnsureBucket leaves the
	// bucket's versioning as it is: S3 can only suspend versioning, never
	// turn it off, and the versions already kept stay until deleted, so
	// there is nothing false could promise. A backend that cannot keep
	// versions answers ErrInvalid, with the bucket created and marked but
	// not versioned.
	Versioning bool
	// Quota is the bucket's limits, made so on every call: a limit the
	// bucket has and Quota does not set is lifted. A driver answers
	// ErrInvalid to a limit its backend does not enforce (CheckQuota says
	// so beforehand); the bucket may then be created and marked, but is
	// not limited.
	Quota Quota
}

// KeyMode says what EnsureCredential does with the user's access keys.
// Each mode serves one purpose of the caller's. Another value, or
// KeepOnlyKey without a KeyID, is ErrInvalid.
type KeyMode uint8

const (
	// ReplaceKeys leaves the user exactly one live key: KeyID if it is a
	// live key of the user, else a new one. Every other key is deleted:
	// one made by an earlier call whose answer was lost (a crash) must not
	// stay live. It is for a caller that is the credential's only writer,
	// and it is the zero KeyMode.
	ReplaceKeys KeyMode = iota
	// AddKey makes a new key beside the user's others and deletes none of
	// them, so that of two callers that overlap neither deletes the key
	// the other recorded. A backend that limits a user's keys makes room
	// by deleting only keys listed in Evict, oldest first; with no room
	// left it answers *KeyLimitError. KeyID is not read.
	AddKey
	// KeepOnlyKey makes KeyID, which the caller recorded after AddKey, the
	// user's only live key: every other key is deleted. When KeyID is not
	// a live key of the user (it, or the user, was deleted), no key is
	// deleted or made, the user is not created, and the answer is
	// ErrKeyGone.
	KeepOnlyKey
)

// CredentialSpec describes the credential EnsureCredential makes so: one
// backend user, marked Owner, allowed Access to Bucket and nothing else,
// with its keys as Keys says.
type CredentialSpec struct {
	// UserName is the backend user name (see UserName).
	UserName string
	// Owner is the owner mark stored on the user.
	Owner string
	// Bucket is the only bucket the credential may reach.
	Bucket string
	// Access is what the credential may do there.
	Access Access
	// Keys is what happens to the user's access keys.
	Keys KeyMode
	// KeyID is the access key id the caller holds: in ReplaceKeys mode
	// the key to keep if live (empty: none), in KeepOnlyKey mode the key
	// to keep (required).
	KeyID string
	// Evict are keys that AddKey may delete to make room for the new one:
	// keys the caller has proved nobody recorded.
	Evict []string
	// AdoptUnmarked lets EnsureCredential adopt an existing user with no
	// owner mark at all: it is marked and given whatever creating it
	// gives, then treated as the caller's.
	AdoptUnmarked bool
}

// Credential is an access key pair.
type Credential struct {
	AccessKeyID string
	// SecretAccessKey is set only for a key this call made. When the key
	// kept is KeyID it is empty: the caller already holds it.
	SecretAccessKey string
	// NewUser reports that this call created the user (the name was free
	// when it asked), so that no key of the user is older than this
	// call's. False when the user existed, and from a driver that cannot
	// tell.
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

// Driver is an object-storage backend. See the package documentation for
// the rules every method follows.
type Driver interface {
	// EnsureBucket creates the bucket if it is missing, adopts it if it
	// carries spec.Owner, and returns ErrOwnedByOther otherwise.
	EnsureBucket(ctx context.Context, spec BucketSpec) error
	// DeleteBucket deletes the bucket if it carries owner. A missing bucket is
	// success. A bucket with another mark, or none, is ErrOwnedByOther and is
	// left untouched. A non-empty bucket is emptied first when purge is set,
	// and is ErrBucketNotEmpty otherwise.
	DeleteBucket(ctx context.Context, name, owner string, purge bool) error
	// EnsureCredential makes the user (created if missing, except in
	// KeepOnlyKey mode; adopted if it carries spec.Owner) and its
	// bucket-scoped policy exist, the policy before any key is made so
	// that no key is live with a stale scope, then handles the user's keys
	// as spec.Keys says and returns the key it leaves for the caller. A
	// user with another mark, or none (unless spec.AdoptUnmarked), is
	// ErrOwnedByOther, untouched.
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
// without a mark (see CredentialSpec.AdoptUnmarked).
type AtomicUserMarker interface {
	// AtomicUserMarks reports whether no user this driver creates can be
	// left without its owner mark, whatever crashes: so an unmarked user
	// under a caller's name was never the caller's. True only once the
	// driver knows it (it has seen the backend keep the mark, or is
	// configured so); false before, and false from the moment it has seen
	// the backend drop it. It makes no backend call.
	AtomicUserMarks() bool
}
