// Package s3gateway runs an S3 server and an AWS-compatible IAM API inside the
// bucketbroker process, so that `bucketbroker serve` needs no external object
// store. Both come from the versitygw library: the S3 gateway stores objects
// in plain files under DataDir/objects (metadata and tags in extended
// attributes), and the IAM API keeps users, access keys and inline policies
// under DataDir/iam.
//
// The IAM API is versitygw's, but its storage is arranged here: versitygw's
// file store keeps every user in one JSON file that each call parses and
// each change rewrites in full (after a backup copy), so a call costs time
// in proportion to the number of users (135 ms per driver call at 300 users
// against 6 ms at a few). userStore keeps the users in a SQLite database,
// DataDir/iam/users.db: a row per user (the user as versitygw's types.User
// encodes, about 1.3 KB; versitygw's store's logic for one user) beside its
// id, its name as stored and case-folded, and its path, and a row per
// access key id, all indexed, so that a call reads or changes its user's
// row and a ListUsers page, in name order, decodes its own users only.
// Nothing is held in memory per user and a start reads no user, whichever
// way the last server ended (TestStartReadsNoUser, BenchmarkOpenUserStore);
// the start-up probes ask for one user and one bucket by name (a listing
// would read every user, or stat every bucket's directory:
// TestStartListsNoBuckets). The database is in WAL mode with
// synchronous=NORMAL: a kill -9 loses no committed change and leaves none
// in part (TestUserStoreKillMidWrite); a crash of the machine may lose the
// last changes (see userStore). Roles, OIDC providers and sessions stay in
// DataDir/iam/iam.json, versitygw's store; an IAM directory with users
// anywhere but the database (in iam.json, or a users folder) is refused
// at start, not served without them (TestUserStoreRefusesUsersElsewhere).
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
// The two public listeners serve whoever reaches them, so they cut slow
// clients and bound their connections (listeners.go): a request header
// must arrive within 10 s of connecting and its body within 30 s plus a
// second per 64 KiB of its length; S3MaxConnections and IAMMaxConnections
// connections are served at once, and one beyond is answered 503.
// versitygw offers neither setting, so they are set on its fasthttp
// servers, read from an unexported field, before they serve. The process's
// own calls (the broker's driver) go elsewhere: each server's handler is
// also served on a loopback port of its own (OwnS3Endpoint,
// OwnIAMEndpoint), whose connections the public limits do not count, so
// no public client can make them fail (TestSlowClientsAreCut).
//
// A process killed inside versitygw can leave files that versitygw never
// repairs and that break later requests: the directory of a CreateBucket
// killed before it stored the bucket's ACL, the empty directories of a
// DeleteObject killed between removing the object and removing the
// directories its key ("a/b/c") passed through, which no listing shows
// and which DeleteBucket counts as content, and the older versions of an
// object whose current version a DeleteObject was deleting. Start repairs
// them before it serves (buckets.go, versions.go), while nothing else
// writes; this walks every directory of every bucket once
// (BenchmarkRepair: 157 ms for 100,000 objects in 10 buckets with the
// directories in the page cache, on 2 shared cores; a cold cache costs a
// disk read per directory). Buckets are repaired on every core at once,
// and a bucket without subdirectories (its link count says so) is not
// read: an empty bucket, the broker's usual one, costs a getxattr and a
// stat (BenchmarkRepairEmptyBuckets: 12.5 µs a bucket against 22.4 before,
// under a load average of 11). A versioned key costs more, three directories
// of its own in the versions folder and its recorded key
// (BenchmarkRepairVersions: 0.5-1.3 s for 10,000 keys with one older
// version each, 51-131 µs a key, on 2 cores shared with a load average
// of 7-15).
//
// The versions need more than a walk. In a versioned bucket versitygw
// keeps the current version of a key as the object's file and the older
// ones in DataDir/versions, in a folder named after the SHA-256 of the
// key; its listings walk the objects and look up each one's folder of
// versions. Deleting the current version removes the object's file and
// then moves the newest older version into its place (a purge deletes
// every version this way, newest first). A kill in between leaves older
// versions with no object: no listing shows them, a deletion of their
// version ID answers success without touching them (it looks at the
// object first), DeleteBucket counts them, and a later PUT of the same
// key would bring them back. They are a user's data that the interrupted
// call was not deleting, so the repair does not remove them: it finishes
// the move, which makes them current, listed and deletable again, as if
// the call had completed. The folder's name cannot give the key back, so
// the server records it: every deletion of a given version (DeleteObject
// and DeleteObjects with a version ID) first writes the key on the folder
// of the key's versions, as an extended attribute (keyRecorder; one
// getxattr per call once written). At start-up a folder of versions that
// holds versions and a key whose SHA-256 is its name, while the key's
// object does not exist, gets its newest version renamed into the
// object's place: the same inode, with the version's data and attributes.
// Versions whose folder carries no key (a folder created by a concurrent
// write to the same key after the deletion looked) stay as they are and keep the
// bucket from being deleted; the broker's purge then says the bucket lists
// nothing that it could delete. A rename across file systems (objects/ and
// versions/ mounted apart) is not attempted: it is logged and left.
//
// The walk of the buckets is for a start that knows nothing of how the
// last server ended. A clean stop (Stop, with both servers shut down
// without error) leaves a file that saves it (cleanstop.go):
// DataDir/clean-stop, the marker that nothing was left half done (not
// left when the S3 server's shutdown waited out versitygw's limit: its
// requests still running then die with the process, as under a kill),
// fsynced after a syncfs of the data's file systems (the object store
// does not fsync, and a crash of the machine must not keep a file that
// vouches for data it lost). It records the stamp (inode, ctime, mtime)
// of the folders it depends on: run/ (every server start binds its socket
// there) and objects/. A start removes it, durably (the folder fsynced),
// before it serves, so any change after a start is made without it and a
// kill or crash from then on leaves none; then it skips the repair only
// if the marker is whole (a CRC) and run/ and objects/ are as recorded.
// So a start after a kill, or after an older bucketbroker, a hand edit or
// another server ran on the data dir (each changes a stamp), does the
// full walk of every bucket; a marker that is not used is reported once (Warn).
//
// After a kill the bucket repair need not walk either: the damage is
// made by the calls the kill interrupted, and each names its bucket. The
// running server keeps DataDir/in-flight (inflight.go): a slot per call
// that can leave damage (CreateBucket, DeleteBucket, PutObject,
// CopyObject, CompleteMultipartUpload, DeleteObject, DeleteObjects, from
// versitygw's posix backend), written with the bucket's name before the
// call reaches versitygw and cleared when it returns, one pwrite each,
// within a page, so that a kill leaves a slot whole, in the page cache
// (BenchmarkInFlightCall: 3-4.5 µs a call, on 2 cores under a load of 7).
// A start with no clean-stop marker repairs the buckets the slots name
// (TestKillWithCreateBucketInFlight; none after a kill with no call in
// flight), if the file is whole (a CRC per record), of this boot, and
// run/ and objects/ are as the killed server recorded them (run/ after
// its socket's bind, objects/ after its last bucket made or removed,
// unless a CreateBucket or DeleteBucket was in flight); otherwise it
// walks every bucket, with one warning (TestInFlightFileNotUsed). The
// boot, not an fsync per call: a crash of the machine may keep a call's
// mkdir and lose its slot, so the file of another boot is not trusted.
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
