// Package engine is bucketbroker's core: it turns OSB requests for service
// instances (buckets) and bindings (bucket-scoped credentials) into durable
// records and drives each record's operation to completion through a
// Backend (backend.go): the bucket steps over a Driver (steps.go), or an
// upstream OSB broker's (Options.Upstreams, internal/upstream), picked per
// record (Record.Upstream). A Backend gets a Work: the record, retried
// steps, compare-and-swap saves and the secret box; the contract below is
// the engine's, whichever backend carries out the steps.
//
// The contract it keeps, whatever the order, repetition or concurrency of
// requests and whatever crashes in between:
//
//   - Intent before side effect. A request first commits a Record (kind, id,
//     canonical request fingerprint, derived backend names, owner mark and an
//     operation) with Store.Insert, an atomic create-if-absent. Concurrent
//     duplicates lose the insert, read the winner's record and answer from it.
//   - Every later change is a compare-and-swap on the record's version. A
//     request that supersedes running work (a DELETE during a provision)
//     swaps in a new operation and interrupts the worker; the old worker's
//     next write is stale, so it stops without further side effects.
//   - One worker per record in this process drives the record's current
//     operation: provision, update, deprovision, bind or unbind. Each step is
//     an idempotent Driver call ("ensure"), so a step repeated after a crash
//     adopts what the previous attempt made. Transient errors are retried
//     with backoff and jitter until the operation's deadline; permanent ones
//     (ownership conflicts, a non-empty bucket) fail the operation at once.
//   - Ownership on the backend follows internal/ensure, shared with the
//     ObjectBucketClaim door: the record's BucketAttempted and
//     UserAttempted hold the look before the first create attempt (none at
//     a user name where the driver says user marks are atomic:
//     ensure.UserLookNeeded), BucketCreated and UserCreated its result
//     (written with the provision's or bind's success: from then on a
//     missing mark fails the deletion, ensure.ErrMarkLost), and the steps
//     (steps.go) call ensure for every create, adopt and delete.
//   - Resume, don't abandon: Start picks up every unfinished operation.
//     At most Options.Workers operations run at once; the others wait in a
//     queue (queue.go), work a request has just started first, and a worker
//     gives its place back while it backs off.
//   - One replica at a time: replicas sharing a store drive an operation
//     under a lease in its record. A holder (lease.go) renews it on its own
//     clock, whatever the worker is doing, and cancels the worker's context
//     the moment the lease is taken or cannot be renewed in time; every
//     backend call has a deadline shorter than the lease. Should two holders
//     overlap anyway (a paused process), a bind keeps the key overlap rule
//     (internal/ensure); a holder whose record write fails deletes only the
//     key it made.
//   - Synchronous when fast: a request with accepts_incomplete=true on a
//     plan that does not require asynchrony records an asynchronous
//     operation and waits for it up to Options.SyncBudget; finished by then,
//     it is answered as a synchronous request (credentials included), else
//     202. A crash inside the budget leaves an asynchronous operation.
//   - Answers come from the record: the status of a duplicate is derived from
//     the stored phase, operation and fingerprint, and a repeated bind
//     returns the stored (sealed) credentials, never a second key. A
//     request waiting for its operation is handed the record as this
//     process's write of it stored it, when that is newer than what the
//     request has seen (else it reads), and a worker whose own write ended
//     the operation stops without reading it back; writes by other
//     processes are seen by reading the store (engine.go: wait, drive).
//
// Secret access keys are sealed with a secretbox before they are stored. Keys
// created by the backend but lost by a crash before they were recorded are
// deleted by the EnsureCredential that follows the next recorded key, which
// keeps only that key.
package engine
