// Package s3gateway runs an S3 server and an AWS-compatible IAM API inside the
// bucketbroker process, so that `bucketbroker serve` needs no external object
// store. Both come from the versitygw library: the S3 gateway stores objects
// in plain files under DataDir/objects (metadata and tags in extended
// attributes), and the IAM API keeps users, access keys and inline policies
// under DataDir/iam.
//
// The IAM API is versitygw's, but its storage is arranged here: versitygw's
// file store keeps every user in one JSON file that each call parses and
// each change rewrites in full, so a call costs time in proportion to the
// number of users (135 ms per driver call at 300 users against 6 ms at a
// few). userStore gives each user versitygw's store of its own, in
// DataDir/iam/users/, and keeps in memory only which store holds which user
// name and access key. Roles, OIDC providers, sessions, and users made
// before this layout stay in DataDir/iam/iam.json and are served as before.
// BenchmarkProvision measures a driver call as the users grow.
//
// The gateway does not hold any user's secret: it asks the IAM API, over a
// private unix socket, to verify each SigV4 signature and to evaluate the
// caller's inline policies. A key deleted through the IAM API is therefore
// rejected by the very next S3 request, and a user's policy is enforced as
// written. The socket is DataDir/run/iam.sock, in a 0700 directory, so
// everything the server writes is under DataDir and it runs on a read-only
// root filesystem (a container's). Unix socket paths are limited to 107
// bytes and data directories need not be: a longer one is reached through
// /proc/self/fd/N/iam.sock, N an open descriptor of DataDir/run.
//
// To a client the two listeners look like any S3 + IAM deployment: the S3
// endpoint checks SigV4 for the configured region, the IAM endpoint for
// us-east-1 (the signing region of IAM in the aws partition). The root keys
// are the only account that may create buckets and users.
//
// A process killed inside versitygw can leave files that versitygw never
// repairs and that break later requests: the directory of a CreateBucket
// killed before it stored the bucket's ACL, and the empty directories of
// a DeleteObject killed between removing the object and removing the
// directories its key ("a/b/c") passed through, which no listing shows
// and which DeleteBucket counts as content. Start repairs both before it
// serves (buckets.go), while nothing else writes; this walks every
// directory of every bucket once (BenchmarkRepair: 157 ms for 100,000
// objects in 10 buckets with the directories in the page cache, on 2
// shared cores; a cold cache costs a disk read per directory).
//
// Limits that come from versitygw and shape how this package is used:
//
//   - One gateway and one IAM API per process: both keep package-level state.
//     Start refuses to run a second Server while one is running, so tests in
//     one package share a single Server (start it in TestMain). After Stop
//     returns, Start may be called again in the same process, on the same
//     data directory or another one.
//   - The posix backend changes the process working directory to
//     DataDir/objects and resolves buckets relative to it. Start makes every
//     path absolute first; other code in the process must not rely on, or
//     change, the working directory while a Server runs.
//   - versitygw prints two lines to stdout when the gateway connects to the
//     IAM API ("initializing standalone IAM ..."); there is no option to
//     silence them. Everything else runs in quiet mode.
//   - versitygw cannot serve on a listener it did not open itself, so a
//     listen address with port 0 is resolved by binding a free port, closing
//     it and handing the number over; if another process takes it in between,
//     Start tries again with a new port.
package s3gateway
