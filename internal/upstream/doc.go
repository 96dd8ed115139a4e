// Package upstream is the engine's Backend for the services of another OSB
// broker (upstream mode, docs/upstream.md): it carries out the operations
// the engine has recorded by calling the upstream through internal/osbclient,
// under the same ids, so that the engine's idempotency contract holds for
// the upstream's services too.
//
// The rules it keeps:
//
//   - The upstream ids are the platform's ids. Before the first request
//     that creates an instance or a binding upstream, the record says so
//     (Record.Upstream.Attempted), durably.
//   - Every request carries accepts_incomplete=true, the service and plan
//     ids, context, parameters, maintenance_info and the originating
//     identity as the platform sent it. A 202 is recorded
//     (Record.Upstream.Op) before it is polled, and the poll relays the
//     upstream's description to bucketbroker's own operation.
//   - With the attempt recorded, a create that gets no answer, a 5xx, a 409
//     or ConcurrencyError is not trusted either way: the backend looks and
//     adopts what it finds, or sends the identical create again. An
//     ambiguous answer never deletes what may be live: last_operation
//     without an operation is a hint (it may speak of an operation the
//     upstream lost track of), GET decides where the catalog says
//     instances_retrievable or bindings_retrievable, and without it an
//     instance that last_operation calls failed gets the identical create
//     again or, answered 409, fails the operation for an operator. Only a
//     creation the upstream reports failed for the operation its 202 named
//     is deleted (and made again by the next provision). A binding whose
//     credentials cannot be fetched again is unbound upstream and bound
//     anew (nobody was ever given those credentials). A 409 to the very
//     first create of an id means the id is someone else's: the operation
//     fails and nothing is deleted.
//   - Trouble (no answer, a timeout, a 5xx, an unreadable answer) reaches
//     the platform as "upstream NAME is unreachable" and the like
//     (engine.Described); the log keeps the whole error.
//   - A binding's credentials are the upstream's JSON object, sealed in the
//     record and never logged; once recorded, the upstream is never asked
//     for them again.
//   - 4xx answers other than 408, 409, 429, 401, 403 and ConcurrencyError
//     are refusals that no retry fixes: the operation fails with the
//     upstream's description. Everything else is retried with backoff
//     until the operation's deadline; a create that gives up without a
//     definite answer deletes what may exist upstream (orphan mitigation).
package upstream
