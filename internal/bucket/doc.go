// Package bucket is the engine's backend for the bucket service: a service
// instance is a bucket, a service binding a user with one key scoped to
// its instance's bucket, made through a driver (pkg/driver) with the
// ownership rules of internal/ensure, which the ObjectBucketClaim door
// shares.
//
// The engine drives it as it drives every backend (engine.Backend): its
// request-time methods check a request (labels the driver would refuse as
// tags, the access a plan allows, rotation), name a new record's bucket or
// user and, when the request may wait, look whether the name is free
// before the intent is recorded; its operations carry out each record's
// provision, update, deprovision, bind and unbind through engine.Work, one
// retried, idempotent step at a time. The driver's errors are mapped to
// the engine's kinds (driver.ErrInvalid to engine.ErrRefused,
// driver.ErrOwnedByOther to engine.ErrNotOurs, a non-empty bucket or a lost
// owner mark to engine.ErrPermanent), keeping their text.
//
// The backend's state is the record's bucket part (engine.BucketState):
// the bucket and user names, the owner mark, and what the record knows of
// their creation. BucketAttempted and UserAttempted hold the look before
// the first create attempt (none at a user name where the driver says user
// marks are atomic: ensure.UserLookNeeded), BucketCreated and UserCreated
// its result, written with the provision's or bind's success: from then on
// a missing mark fails the deletion (ensure.ErrMarkLost).
//
// A bind keeps the key overlap rule of internal/ensure: a key is created
// beside the user's others, recorded (its secret sealed) before anyone is
// told of it, and only then are the others deleted. Keys created but lost
// by a crash before they were recorded are deleted by the credential call
// that follows the next recorded key; a holder whose record write fails
// deletes only the key it made.
package bucket
