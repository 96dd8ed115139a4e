// Package ensure holds the steps by which both of bucketbroker's doors (the
// OSB engine, internal/engine, and the ObjectBucketClaim reconciler,
// internal/objectbucket) make a bucket or a user theirs on the backend and
// undo it, with the rules that keep those steps safe across crashes. Each
// door keeps its own record, retries and events; the order of the backend
// calls and the ownership rules live here, once.
//
// The backend marks what a caller owns (pkg/driver: an owner mark on a
// bucket or user), but creating a resource and marking it are two calls,
// and a crash in between leaves an unmarked resource that is the caller's
// own and looks like anyone else's. The rules that tell them apart:
//
//   - Look before the first create attempt, and record the attempt
//     durably. Look observes the names whose attempt the caller's record
//     does not hold yet; a name that is free, or already carries the
//     caller's mark, may be recorded as attempted (the engine's
//     BucketAttempted and UserAttempted, the ObjectBucket's attempt
//     annotations), and the record is written before any Ensure call. A
//     name that is taken (another owner's mark, or no mark at all) is
//     never recorded: the caller fails the request and touches nothing.
//   - Adopt an unmarked resource only while its creation is unconfirmed:
//     the record holds the attempt and not yet its result (Creation
//     Unconfirmed: the crash window between the create call and the write
//     of its result, or a create that failed). Bucket and Credential pass
//     driver.BucketSpec.AdoptUnmarked and driver.CredentialSpec.AdoptUnmarked
//     only then (or, for a bucket, with other durable evidence that it is
//     the caller's: spec.AdoptUnmarked, short of Created). Another owner's
//     mark is never adopted.
//   - Once the record says the resource was created and marked (Created:
//     the engine's BucketCreated and UserCreated, written with a provision's
//     or bind's success; a Bound ObjectBucket), a resource under the name
//     without the caller's mark (none, or another owner's) was changed by
//     someone: every step refuses it with ErrMarkLost and changes nothing.
//     The caller's operation fails, naming the resource and what to do (put
//     the mark back, or remove the resource by hand), and the leak audit
//     reports it (mark-lost); it is never deleted, whatever its contents.
//   - A delete or revoke refused as not ours, with the creation
//     unconfirmed, means "ours, left unmarked by a crash": DeleteBucket and
//     RevokeUser mark it (the Ensure call with AdoptUnmarked) and then
//     delete it, or nothing would ever find it again (no audit lists an
//     unmarked resource). The usual path makes no extra call. Adopting a
//     user makes a key nobody holds (read-only, the least a key needs); the
//     revoke that follows deletes it with the user, and a crash in between
//     leaves a marked user that the resumed deletion revokes.
//   - Another owner's mark, or no mark and no attempt recorded: never
//     deleted. DeleteBucket and RevokeUser answer driver.ErrOwnedByOther
//     and change nothing; the caller leaves it in place and says so (a log
//     line, an Event) and counts its deletion done. A missing bucket or
//     user is success.
//
// The look at a user name is needed only where a crash can leave a user of
// the caller's unmarked: where the driver says the backend writes a new
// user and its mark at once (driver.AtomicUserMarker, UserLookNeeded), no
// user of the caller's is ever unmarked, so the caller neither looks nor
// records the attempt. An unmarked user under the name is then someone
// else's, and Credential without the attempt refuses it; with the mark it
// is the caller's own, adopted; a missing one is created. The rest stands:
// RevokeUser without the attempt never deletes an unmarked user, and a
// record that holds the attempt (written where a look was needed) still
// passes AdoptUnmarked.
//
// Buckets keep their look, even where the create carries the mark (the
// s3iam driver sends it in CreateBucket and, once it has read it back from
// the server's first new bucket, writes no separate tagging): a server may
// write a new bucket before its mark, and a crash of the server in between
// leaves an unmarked bucket of the caller's own. versitygw's posix backend
// does (it makes the directory, then writes the ACL, the ownership and the
// tags in turn; the embedded server removes a directory left without an
// ACL at its start, and the versitygw process leaves it, as it always
// has). Neither door creates a bucket without its attempt recorded first
// (the engine writes BucketAttempted before the provision's create; the
// reconciler puts the flag in the ObjectBucket's Create), so the retry of
// a create the server cut short adopts what it left, as it adopts a bucket
// left unmarked between two calls. What the mark in the create removes is
// the window of the caller's own crash between the create and the
// tagging. A server that drops the element, or refuses it, is known from
// its first new bucket, and the mark is then written in its own call for
// the process's life; a server changed under a running process to one
// that drops it would leave new buckets unmarked behind a provision that
// succeeded: refused as changed (ErrMarkLost) and reported by the leak
// audit (mark-lost), never deleted.
//
// One rule is about keys rather than names, and only the engine needs it
// (two replicas can hold one binding's operation at once, a process paused
// past its lease; the reconciler's Secret has one writer): a key is created
// beside the user's others (driver.AddKey), recorded, and only then are
// the others deleted (driver.KeepOnlyKey), so that of two holders neither
// deletes the key the other recorded. A key is deleted to make room only
// once the caller proved nobody recorded it (driver.CredentialSpec.Evict).
// Where the call that made the key also created the user
// (driver.Credential.NewUser) no key older than the user's own creation
// exists, and the deletion of the others is skipped: the key is recorded
// in the write that ends the bind. What that leaves (a key an overlapping
// holder made and, dying, never dropped; nobody was answered it) and why
// it gives no key to two parties: internal/bucket's recordNewUserKey. See
// internal/bucket's Bind.
//
// Two clean-ups delete without these steps, and need no adoption: the
// engine's key that a holder made but could not record, and the
// reconciler's user made for a Secret whose name turned out to be taken.
// Each deletes what the caller made a moment before, marked, and the
// driver refuses anything else.
//
// The functions take the driver.Driver and a context whose deadline covers
// the whole step (the adopt-then-delete is two or three calls); they make
// no retries, write no record and log nothing. The tests run them against
// the embedded S3 + IAM server.
package ensure
