// Package driver defines the contract between bucketbroker's engine and an
// object-storage backend, and the deterministic names both sides agree on.
//
// A Driver is a set of "make it so" calls. Every call may be repeated any
// number of times, concurrently with nothing else for the same resource (the
// engine serializes work per resource), and after a crash at any point of a
// previous call. Each call therefore observes what exists, adopts what carries
// the caller's owner mark, refuses with ErrOwnedByOther what carries anyone
// else's (touching nothing), and creates only what is missing. A resource
// with no mark at all is refused the same way, unless the spec says
// AdoptUnmarked. When a caller may set it, and how a refused delete of its
// own unmarked resource is handled, is bucketbroker's internal/ensure: the
// one place that explains and implements those rules for both doors.
//
// Owner marks are opaque strings chosen by the caller (the engine derives them
// from the instance or binding id). A driver stores them on the backend
// resource itself: a bucket tag, an IAM user tag or path. They are how a retry
// after a crash recognizes its own work, and how the leak audit finds resources
// that no record knows.
//
// Errors: ErrOwnedByOther and ErrBucketNotEmpty are permanent (a retry cannot
// fix them); ErrInvalid marks a request the backend can never accept. Every
// other error is treated as transient and retried with backoff.
package driver
