// Package drivertest is the conformance suite every bucketbroker driver
// passes, in the spirit of csi-sanity: it holds a driver to the contract in
// package driver (idempotent calls, owner marks, no touching what is not
// ours, one live key per credential, keys scoped to their bucket) by
// driving it against a real S3 server and checking the server's state with
// plain S3 and IAM clients.
//
// A driver author calls Run from a test in the driver's package, after
// starting (or pointing at) a server:
//
//	func TestConformance(t *testing.T) {
//		d, err := mydriver.New(...)
//		if err != nil {
//			t.Fatal(err)
//		}
//		drivertest.Run(t, drivertest.Config{
//			Driver:              d,
//			S3Endpoint:          endpoint,
//			IAMEndpoint:         iamEndpoint,
//			Region:              "us-east-1",
//			PathStyle:           true,
//			RootAccessKeyID:     rootKey,
//			RootSecretAccessKey: rootSecret,
//			Prefix:              "bbtest",
//		})
//	}
//
// The root keys are the server's administrator: the suite uses them to make
// "foreign" resources the driver must refuse (a bucket and a user created
// behind its back, without owner marks), to look at what the driver left
// behind, and to clean up. Access checks use the keys the driver hands out,
// with a real S3 client, so a policy that is too wide or too narrow fails.
//
// A driver that implements the optional driver.Auditable (the leak audit's
// inventory) is checked under Inventory/*: it lists its own marked bucket
// and user with their keys, leaves out unmarked ones (and, where it is a
// driver.PagedAuditable, InventoryPages' pages together say the same), and
// DeleteAccessKey deletes one key of its own users only. Drivers without
// it skip those.
//
// Credential/* checks each driver.KeyMode: ReplaceKeys keeps a live KeyID
// and replaces every other key, or all of them when KeyID is gone (a lost
// answer); AddKey deletes no other key, and at the backend's limit on a
// user's keys only those in Evict (*driver.KeyLimitError otherwise);
// KeepOnlyKey deletes every other key, or nothing when its key or its user
// is gone (driver.ErrKeyGone, no user created).
//
// Bucket/Versioning checks a bucket made with BucketSpec.Versioning: the
// server keeps two versions of a key put twice, a repeated EnsureBucket
// keeps versioning on, and only a purging delete removes a bucket that
// holds versions. For a server without versioning set Config.NoVersioning:
// the check then expects driver.ErrInvalid.
//
// Bucket/Quota checks BucketSpec.Quota against the driver's
// driver.QuotaEnforcer: a size limit refuses an object larger than it,
// follows a raised or lowered limit, and goes when the spec sets none; a
// limit the driver does not enforce is driver.ErrInvalid from CheckQuota
// and EnsureBucket alike.
//
// Every subtest derives its names with driver.BucketName and
// driver.UserName from a random id, so the suite can run against a shared
// server, repeatedly, and in parallel with itself; it deletes what it makes.
// Subtests run in parallel. On servers where IAM changes take time to
// reach S3 (AWS), set Config.Propagation: checks of a new key or a revoked
// key then retry for that long instead of expecting the answer at once.
package drivertest
