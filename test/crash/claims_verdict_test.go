package crash

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestClaimVerdictsCatchFaults makes by hand the faults the claim table
// looks for, on a claim the controller bound, and checks that each gets its
// verdict: a proof whose checks cannot fail proves nothing.
func TestClaimVerdictsCatchFaults(t *testing.T) {
	api, kubeconfig := claimAPIServer(t)
	setup := newClaimRun(t, api, kubeconfig, "verdicts")
	if !setup.start() || !setup.foreignBucket() || !setup.createClaim() || !setup.waitBound() {
		t.Fatalf("setup: %s %v", setup.out, setup.notes)
	}
	setup.checkBound()
	if !setup.ok() {
		t.Fatalf("the claim as the controller left it: %s %v, want converged", setup.out, setup.notes)
	}
	be := setup.ctl.Backend
	ctx := context.Background()
	iamc := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(be.IAM),
		Credentials: credentials.NewStaticCredentialsProvider(be.AccessKey, be.SecretKey, "")})
	user := aws.String(driver.UserName(harness.ControllerPrefix, "claim", string(setup.uid)))

	// Each case starts from the claim as the earlier ones left it: the
	// order keeps each case's premise.
	for _, tc := range []struct {
		name, reason string
		fault        func(t *testing.T)
		check        func(r *claimRun)
		want         outcome
	}{{
		name: "a second key", reason: "a key besides the Secret's is a leak",
		fault: func(t *testing.T) {
			out, err := iamc.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: user})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // later cases start without it
				_, _ = iamc.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: user, AccessKeyId: out.AccessKey.AccessKeyId})
			})
		},
		check: (*claimRun).checkBound, want: leaked,
	}, {
		name: "keys that reach another bucket", reason: "a Secret whose keys write outside the claim's bucket leaks access",
		fault: func(t *testing.T) {
			if err := be.CreateBucket("foreign-verdicts-root"); err != nil {
				t.Fatal(err)
			}
		},
		check: func(r *claimRun) {
			// The root keys in the Secret's place: they write anywhere.
			r.ak, r.sk, r.foreign = be.AccessKey, be.SecretKey, "foreign-verdicts-root"
			r.checkKeys()
		},
		want: leaked,
	}, {
		name: "a second bucket", reason: "a bucket of ours besides the claim's is a leak",
		fault: func(t *testing.T) {
			if err := be.CreateBucket(harness.ControllerPrefix + "-intruder"); err != nil {
				t.Fatal(err)
			}
		},
		check: (*claimRun).checkBound, want: leaked,
	}, {
		name: "the Secret's key revoked", reason: "a Secret whose key the backend lost is a loss",
		fault: func(t *testing.T) {
			if _, err := iamc.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: user, AccessKeyId: aws.String(setup.ak)}); err != nil {
				t.Fatal(err)
			}
		},
		check: (*claimRun).checkBound, want: lost,
	}, {
		name: "a finalizer never removed", reason: "a deleted claim still there at the deadline is stuck",
		fault: func(t *testing.T) {
			setup.ctl.Stop() // nobody removes the finalizer
			if !setup.deleteClaim() {
				t.Fatal(setup.notes)
			}
		},
		check: func(r *claimRun) { r.wait = 2 * time.Second; r.waitGone() },
		want:  stuck,
	}, {
		name: "a bucket left", reason: "a bucket of ours after the claim is gone is a leak",
		fault: func(t *testing.T) {
			if !setup.start() || !setup.waitGone() {
				t.Fatal(setup.notes)
			}
		},
		check: (*claimRun).checkClean, want: leaked, // the intruder
	}, {
		name: "the foreign bucket deleted", reason: "deleting what was never the claim's is a loss",
		fault: func(t *testing.T) {
			if err := be.DeleteBucket(setup.foreign); err != nil {
				t.Fatal(err)
			}
		},
		check: (*claimRun).checkClean, want: lost,
	}, {
		name: "a point never reached", reason: "a process that does not die at its point is a broken cell",
		fault: func(t *testing.T) {},
		check: func(r *claimRun) {
			r.ctl.Stop()
			r.point, r.wait = "claim/no-such-point", 2*time.Second
			if r.start(r.point) {
				r.crashAndRestart()
			}
		},
		want: broken,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fault(t)
			r := *setup
			r.out, r.notes = converged, nil
			tc.check(&r)
			if r.out != tc.want {
				t.Errorf("%s (%s): verdict %s %v, want %s", tc.name, tc.reason, r.out, r.notes, tc.want)
			}
		})
	}
}
