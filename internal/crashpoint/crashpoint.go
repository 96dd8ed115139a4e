package crashpoint

import (
	"fmt"
	"os"
	"strings"
)

// EnvVar names the points at which the process exits.
const EnvVar = "BUCKETBROKER_CRASH_AT"

// ExitCode is the status the process exits with at a crash point, the one a
// shell reports for SIGKILL.
const ExitCode = 137

// Point is a named crash point: "<operation>/<what has just happened>", or
// "<resource>/<what>" for a driver's (see the package doc). Hit takes one,
// so that a call site names a constant below, and the harnesses' lists
// (Points, ClaimPoints) are checked against the call sites by this
// package's tests.
type Point string

// The OSB engine's points (internal/engine) and the driver's
// (internal/driver/s3iam), in the order a provision, a deprovision, a
// bind and an unbind pass them.
const (
	ProvisionRecordWritten     Point = "provision/record-written"
	BucketCreatedUnmarked      Point = "bucket/created-unmarked"
	ProvisionBucketCreated     Point = "provision/bucket-created"
	DeprovisionRecordWritten   Point = "deprovision/record-written"
	DeprovisionBindingsRevoked Point = "deprovision/bindings-revoked"
	DeprovisionBucketDeleted   Point = "deprovision/bucket-deleted"
	BindRecordWritten          Point = "bind/record-written"
	BindKeyCreated             Point = "bind/key-created"
	BindKeyRecorded            Point = "bind/key-recorded"
	UnbindRecordWritten        Point = "unbind/record-written"
	UnbindUserRevoked          Point = "unbind/user-revoked"
)

// The upstream backend's points (internal/upstream): an upstream's answer
// to a create that bucketbroker has not recorded yet, the credentials of an
// upstream binding recorded, and an upstream delete done and not recorded.
const (
	ProvisionUpstreamAnswered  Point = "provision/upstream-answered"
	BindUpstreamAnswered       Point = "bind/upstream-answered"
	BindUpstreamRecorded       Point = "bind/upstream-credentials-recorded"
	UnbindUpstreamDeleted      Point = "unbind/upstream-deleted"
	DeprovisionUpstreamDeleted Point = "deprovision/upstream-deleted"
)

// The ObjectBucketClaim reconciler's points (internal/objectbucket), one
// after each of its named writes.
const (
	ClaimPatched             Point = "claim/claim-patched"
	ClaimObjectBucketCreated Point = "claim/objectbucket-created"
	ClaimBucketCreated       Point = "claim/bucket-created"
	ClaimKeyCreated          Point = "claim/key-created"
	ClaimSecretWritten       Point = "claim/secret-written"
	ClaimConfigMapWritten    Point = "claim/configmap-written"
	ClaimObjectBucketBound   Point = "claim/objectbucket-bound"
	ClaimCredentialRevoked   Point = "claim/credential-revoked"
	ClaimBucketDeleted       Point = "claim/bucket-deleted"
	ClaimObjectsDeleted      Point = "claim/objects-deleted"
	// ClaimKeysStashed and ClaimSecretReleased are passed only when the
	// claim's Secret is recreated after someone deleted it (drift repair):
	// the claim crash table's repair cells delete it.
	ClaimKeysStashed    Point = "claim/keys-stashed"
	ClaimSecretReleased Point = "claim/secret-released"
)

// What is the part of the name after the slash: what has just happened.
func (p Point) What() string {
	_, what, _ := strings.Cut(string(p), "/")
	return what
}

var armed = parse(os.Getenv(EnvVar))

func parse(v string) map[Point]bool {
	if v == "" {
		return nil
	}
	m := map[Point]bool{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			m[Point(p)] = true
		}
	}
	return m
}

// Hit exits the process at once if p is armed.
func Hit(p Point) {
	if armed == nil || !armed[p] {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: exiting at %s\n", p)
	os.Exit(ExitCode)
}

// Points lists the broker's crash points, for harnesses that iterate over
// them; TestListsMatchCallSites checks it against the Hit calls.
// BucketCreatedUnmarked is the driver's (internal/driver/s3iam): a bucket
// created and not yet tagged with its owner mark, passed by every
// provision that creates one.
var Points = []Point{
	ProvisionRecordWritten,
	BucketCreatedUnmarked,
	ProvisionBucketCreated,
	DeprovisionRecordWritten,
	DeprovisionBindingsRevoked,
	DeprovisionBucketDeleted,
	BindRecordWritten,
	BindKeyCreated,
	BindKeyRecorded,
	UnbindRecordWritten,
	UnbindUserRevoked,
}

// UpstreamPoints lists the upstream backend's crash points, in the order a
// provision, a bind, an unbind and a deprovision pass them.
var UpstreamPoints = []Point{
	ProvisionUpstreamAnswered,
	BindUpstreamAnswered,
	BindUpstreamRecorded,
	UnbindUpstreamDeleted,
	DeprovisionUpstreamDeleted,
}

// ClaimPoints lists the ObjectBucketClaim controller's crash points, in the
// order a claim's lifecycle passes them: provisioning, the repair of a
// deleted Secret, then deletion. The driver's BucketCreatedUnmarked is
// passed between the ObjectBucket's creation and the end of the claim's
// EnsureBucket.
var ClaimPoints = []Point{
	ClaimPatched,
	ClaimObjectBucketCreated,
	BucketCreatedUnmarked,
	ClaimBucketCreated,
	ClaimKeyCreated,
	ClaimSecretWritten,
	ClaimConfigMapWritten,
	ClaimObjectBucketBound,
	ClaimKeysStashed,
	ClaimSecretReleased,
	ClaimCredentialRevoked,
	ClaimBucketDeleted,
	ClaimObjectsDeleted,
}
