// Package s3iam is the driver for any backend that speaks the S3 API for
// buckets and the AWS IAM API for users: AWS itself, versitygw (and so
// bucketbroker's embedded server), Ceph RGW, SeaweedFS. It uses only
// calls those servers share.
//
// # Owner marks
//
// Every bucket the driver makes carries the tag bucketbroker.io/owner with
// the caller's owner mark; extra tags from the spec sit beside it and are
// replaced on each EnsureBucket. Keys under bucketbroker.io/ are reserved.
// The tags travel in the CreateBucket call itself
// (CreateBucketConfiguration.Tags). The process's first new bucket reads
// them back (GetBucketTagging); a server that kept them gets no further
// tagging call for any later bucket, one that dropped them (or refused the
// element: the create is then sent again without it) gets PutBucketTagging
// right after each CreateBucket for the process's life. On such a server a
// crash between the two calls leaves an unmarked bucket; so can a server
// killed inside its own CreateBucket, which may write the directory before
// the tags (versitygw's posix backend does).
//
// Every user is created with path /bucketbroker/ and the same tag, in the
// CreateUser call itself. A server that ignores the tags of CreateUser
// (SeaweedFS) gets them from TagUser right after; there a crash in between
// leaves an unmarked user. AtomicUserMarks reports which kind of server
// this is, once a CreateUser answer has shown it.
//
// Each call looks before it acts. A resource with the caller's mark is
// adopted; one with another mark, or none, is refused with
// driver.ErrOwnedByOther and left exactly as it was. The one exception is
// a bucket or user without any mark when the spec says AdoptUnmarked: that
// is the engine telling us it attempted the creation itself and may have
// crashed before the tag was written. Such a bucket gets its tags; such a
// user gets the path /bucketbroker/ (UpdateUser) and then the tag, and is
// from then on treated as ours: its keys as the key mode says.
// Ownership is read from the owner tag alone: the path names no owner. A
// bucket the driver's credentials may not even look at (HTTP 403) belongs
// to another account and is refused the same way.
//
// # Policy scoping
//
// A credential is an IAM user with one inline policy,
// bucketbroker-bucket-access, allowing the actions of its access mode on
// arn:aws:s3:::BUCKET (listing, location, multipart listing) and on
// arn:aws:s3:::BUCKET/* (object actions) and nothing else. read-write may
// get, put, delete and list; read-only may get and list; write-only may put
// (multipart included) but not read or list. Every EnsureCredential makes
// the policy current before any key is made, so a changed spec takes
// effect and no key is ever live with a stale scope: it writes it, except
// where the caller named a recorded key (KeyID) and the policy read
// beside the look at the user is already the one wanted.
//
// # Round trips
//
// Calls that do not depend on each other's answers are made at once, so
// that a backend a network round trip away costs as few round trips as
// the work allows: a new user's policy beside its first key (and beside
// its owner mark, where the server ignored CreateUser's tags), a new
// bucket's tagging beside its versioning, the look at a user whose key
// the caller recorded beside the listing of its keys and the read of its
// policy, the purge's three first reads, Observe's bucket beside its
// user. Each such pair is written where a crash between its halves leaves
// a state the retry already repairs (the comments at each say which).
//
// # Lost keys
//
// A secret access key is shown once, in the CreateAccessKey answer. If the
// process crashes before the caller records it, the key is live and nobody
// holds it. The key modes (driver.KeyMode) deal with it: ReplaceKeys
// deletes every key of the user but the recorded one (KeyID) before it
// makes a new one (AWS allows only two per user), so the orphan dies;
// AddKey deletes none (IAM's limit of two keys lets only the caller's
// Evict give way) and KeepOnlyKey then deletes every key but the one the
// caller recorded since. The recorded key is returned without its secret
// (the caller has it); a new one with its secret.
//
// RevokeCredential deletes the keys first, then the inline policies, then
// the user, so a credential is dead from the first step on, even if a later
// step fails and is retried.
//
// # Calls and errors
//
// Every SDK call gets a deadline (Config.CallTimeout, 30s by default) when
// the caller's context has none, and keeps the SDK's standard retryer
// (three attempts with backoff). Errors are classified by API error code:
// missing things (NoSuchBucket, NoSuchTagSet, NoSuchEntity) are states, not
// errors; BucketAlreadyExists is driver.ErrOwnedByOther; refusals no retry
// can fix (InvalidBucketName, InvalidTag, MalformedXML, InvalidArgument,
// InvalidRequest, BadRequest, ValidationError, MalformedPolicyDocument)
// wrap driver.ErrInvalid, in a text fit for the platform's user: what was
// being done and the server's code and message, without the SDK's request
// and host ids (the engine shows it as the operation's description). Tags
// the server would refuse (driver.CheckTags) are refused before any call,
// so that no bucket is created only to fail its tagging. Secrets never
// appear in errors. Observe with an empty request checks both endpoints and returns
// an *EndpointError per failing one, naming the endpoint and the cause.
//
// Checksums are sent only where the S3 API requires them (DeleteObjects),
// because several S3-compatible servers reject the SDK's default trailing
// checksums. Requests to a custom IAM endpoint are signed for us-east-1
// (Config.IAMRegion), the region IAM uses in the aws partition and the one
// versitygw and Ceph expect.
package s3iam
