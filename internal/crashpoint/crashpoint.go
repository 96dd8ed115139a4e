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

var armed = parse(os.Getenv(EnvVar))

func parse(v string) map[string]bool {
	if v == "" {
		return nil
	}
	m := map[string]bool{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			m[p] = true
		}
	}
	return m
}

// Hit exits the process at once if name is armed.
func Hit(name string) {
	if armed == nil || !armed[name] {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: exiting at %s\n", name)
	os.Exit(ExitCode)
}

// Points lists the broker's crash points, for harnesses that iterate over
// them. Keep it in step with the Hit calls. "bucket/created-unmarked" is
// the driver's (internal/driver/s3iam): a bucket created and not yet
// tagged with its owner mark, passed by every provision that creates one.
var Points = []string{
	"provision/record-written",
	"bucket/created-unmarked",
	"provision/bucket-created",
	"deprovision/record-written",
	"deprovision/bindings-revoked",
	"deprovision/bucket-deleted",
	"bind/record-written",
	"bind/key-created",
	"bind/key-recorded",
	"unbind/record-written",
	"unbind/user-revoked",
}

// ClaimPoints lists the ObjectBucketClaim controller's crash points, in the
// order a claim's lifecycle passes them: provisioning, then deletion. Keep
// it in step with the reconciler's named writes; the driver's
// "bucket/created-unmarked" is passed between the ObjectBucket's creation
// and the end of the claim's EnsureBucket.
var ClaimPoints = []string{
	"claim/claim-patched",
	"claim/objectbucket-created",
	"bucket/created-unmarked",
	"claim/bucket-created",
	"claim/key-created",
	"claim/secret-written",
	"claim/configmap-written",
	"claim/objectbucket-bound",
	"claim/credential-revoked",
	"claim/bucket-deleted",
	"claim/objects-deleted",
}
