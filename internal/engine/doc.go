// Package engine is bucketbroker's core: it turns OSB requests for service
// instances and bindings into durable records and drives each record's
// operation to completion through the Backend that serves its service
// (backend.go, Options.Backends, named in Record.Backend): the bucket
// backend (internal/bucket) or an upstream OSB broker (internal/upstream).
// The engine knows no backend by name. A Backend's Operations get a Work:
// the record, retried steps, compare-and-swap saves and the secret box; its
// Requests answer what differs per backend while a request is answered
// (checks, the state a new record starts with, a binding's credentials).
// Each backend keeps its state in its own part of the record
// (Record.Bucket, Record.Upstream). The contract below is the engine's,
// whichever backend carries out the steps.
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
//     an idempotent backend call (Work.Step), so a step repeated after a
//     crash adopts what the previous attempt made. Transient errors are
//     retried with backoff and jitter until the operation's deadline;
//     permanent ones (ErrRefused, ErrNotOurs, ErrPermanent: an ownership
//     conflict, a non-empty bucket) fail the operation at once.
//   - Resume, don't abandon: Start picks up every unfinished operation.
//     At most Options.Workers operations run at once; the others wait in a
//     queue (queue.go), work a request has just started first, and a worker
//     gives its place back while it backs off.
//   - One replica at a time: replicas sharing a store drive an operation
//     under a lease in its record. A holder (lease.go) renews it on its own
//     clock, whatever the worker is doing, and cancels the worker's context
//     the moment the lease is taken or cannot be renewed in time; every
//     backend call has a deadline shorter than the lease. Should two holders
//     overlap anyway (a paused process), every write is a compare-and-swap
//     that one of them loses, and the loser stops (the bucket backend's
//     bind keeps the key overlap rule of internal/ensure: a holder whose
//     record write fails deletes only the key it made).
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
//     processes are seen by reading the store (wait in wait.go,
//     driveUnderLease in workers.go).
//
// A binding's secret (a key's secret, an upstream's credentials) is sealed
// with a secretbox before it is stored (Work.SealCredentials).
package engine
