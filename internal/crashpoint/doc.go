// Package crashpoint lets tests kill the process at named points between a
// durable write and a side effect, as kill -9 would, to prove that every
// such point converges after a restart.
//
// It is inert unless the environment variable BUCKETBROKER_CRASH_AT names
// points when the process starts (comma-separated, e.g.
// "provision/bucket-created,bind/key-created"). A point's name is
// "<operation>/<what has just happened>"; each is a constant of type
// Point, which Hit takes. TestListsMatchCallSites checks that every call
// site names a constant and that the lists the crash harnesses walk
// (Points, ClaimPoints) hold every point of their door. A point inside a
// driver, which does not know the operation that called it, is named for
// the resource instead: "bucket/created-unmarked" falls between two backend
// calls of one driver call (CreateBucket, then the owner mark), where only
// the caller's record can tell the unmarked bucket from someone else's.
// When the process
// reaches a named point it writes one line to stderr and exits with status
// 137 at once: no deferred functions, no flushing, no graceful shutdown.
package crashpoint
