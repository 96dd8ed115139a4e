// Package driver is the contract between bucketbroker and an
// object-storage backend: the Driver interface, the optional interfaces
// beside it, and the deterministic names and owner marks both sides agree
// on. pkg/driver/drivertest proves a driver against it.
//
// Every call is "make it so". It may be repeated any number of times, and
// after a crash at any point of an earlier call, so it observes what
// exists, adopts what carries the caller's owner mark, and creates only
// what is missing. It never changes or deletes a resource with another
// owner's mark, or with none: it answers ErrOwnedByOther. The one
// exception is a spec's AdoptUnmarked, which adopts a resource with no
// mark at all (never one with another owner's): the caller sets it only
// while its own durable record says it attempted the creation and has not
// seen it succeed, which is when a crash between a create and its marking
// can have left the caller's own resource unmarked. The caller serializes
// the calls for one resource, but a caller paused past its lease can
// overlap the next: the key modes (KeyMode) keep two callers of one
// credential from deleting each other's recorded key.
//
// Owner marks are opaque strings chosen by the caller (OwnerMark). A
// driver stores them on the backend resource itself (a bucket tag, an IAM
// user tag), reads them back on every call, and keeps no memory of a mark
// it no longer sees.
//
// Errors: ErrOwnedByOther, ErrBucketNotEmpty and ErrInvalid are permanent
// (Permanent: a retry cannot fix them). ErrKeyGone and *KeyLimitError are
// answers of the key modes. Every other error is treated as transient and
// retried with backoff.
package driver
