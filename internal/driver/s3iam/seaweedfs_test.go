package s3iam

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/pkg/driver/drivertest"
)

// The SeaweedFS server TestConformanceSeaweedFS runs against, named by the
// environment exactly as `hack/seaweedfs.sh start DIR` prints it. SeaweedFS
// serves its IAM API on the S3 port, so both endpoints are the same URL.
var seaweedfsEnv = serverEnv{
	s3Endpoint:  "BUCKETBROKER_TEST_SEAWEEDFS_S3_ENDPOINT",
	iamEndpoint: "BUCKETBROKER_TEST_SEAWEEDFS_IAM_ENDPOINT",
	accessKey:   "BUCKETBROKER_TEST_SEAWEEDFS_ACCESS_KEY",
	secretKey:   "BUCKETBROKER_TEST_SEAWEEDFS_SECRET_KEY",
	script:      "hack/seaweedfs.sh",
	leftOut:     seaweedfsLeftOut,
}

// seaweedfsLeftOut says why SeaweedFS is not running, if it was left out on
// purpose. It is optional, even in CI: its first build takes about 8
// minutes, so hack/with-test-servers.sh starts it only when the build is
// cached (or asked for), and says why in BUCKETBROKER_TEST_SEAWEEDFS_SKIP
// otherwise. Run without that script, a missing build is the reason too.
func seaweedfsLeftOut() string {
	if reason := os.Getenv("BUCKETBROKER_TEST_SEAWEEDFS_SKIP"); reason != "" {
		return reason
	}
	out, err := exec.Command(seaweedfsScript, "cached").CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) { // not built; a script that cannot run fails the test
		return strings.TrimSpace(string(out))
	}
	return ""
}

// seaweedfsScript is absolute: TestMain's embedded server changes the
// working directory, after package variables are set.
var seaweedfsScript = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..", "..", "hack", "seaweedfs.sh")
}()

// TestConformanceSeaweedFS runs the conformance suite against SeaweedFS
// (`weed mini`, started by hack/seaweedfs.sh), the second S3 + IAM
// implementation the driver is proven on. docs/drivers.md lists the
// results and how SeaweedFS differs from AWS.
func TestConformanceSeaweedFS(t *testing.T) {
	cfg := envConfig(t, seaweedfsEnv)
	d := usableDriver(t, cfg)

	t.Run("Suite", func(t *testing.T) {
		drivertest.Run(t, suiteConfig(d, cfg, "bbswfs"))
	})
	t.Run("HealthErrors", func(t *testing.T) {
		testHealthErrors(t, cfg)
	})
	t.Run("NoSelfServiceKeys", func(t *testing.T) {
		testNoSelfServiceKeys(t, d, cfg)
	})
}

// testNoSelfServiceKeys checks that a credential cannot make more keys for
// itself. AWS refuses it, the policy granting no iam: action; SeaweedFS
// allows every identity to manage its own keys unless started with
// -s3.iam.selfServiceRequiresGrant=true, as hack/seaweedfs.sh does. Without
// it a credential holder could mint keys the engine never hands out, and
// "one live key per credential" would not hold.
func testNoSelfServiceKeys(t *testing.T, d *Driver, cfg Config) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	id := randomHex(8)
	bucket, user := driver.BucketName("bbswfs", "self", id), driver.UserName("bbswfs", "self", id)
	owner := driver.OwnerMark("self", id)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.RevokeCredential(ctx, user, owner); err != nil {
			t.Errorf("cleanup: revoke %q: %v", user, err)
		}
		if err := d.DeleteBucket(ctx, bucket, owner, true); err != nil {
			t.Errorf("cleanup: delete bucket %q: %v", bucket, err)
		}
	})
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: bucket, Owner: owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	cred, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: user, Owner: owner, Bucket: bucket, Access: driver.AccessReadWrite})
	if err != nil {
		t.Fatalf("EnsureCredential: %v", err)
	}
	self := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
		Region:       defaultIAMRegion,
		BaseEndpoint: &cfg.IAMEndpoint,
		Credentials:  credentials.NewStaticCredentialsProvider(cred.AccessKeyID, cred.SecretAccessKey, ""),
	})
	for name, in := range map[string]*iam.CreateAccessKeyInput{
		"implicit user": {},
		"own user name": {UserName: &user},
	} {
		_, err := self.CreateAccessKey(ctx, in)
		if !hasCode(err, "AccessDenied") {
			t.Errorf("CreateAccessKey (%s) with the credential's own key: got %v, want AccessDenied", name, err)
		}
	}
	obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: user})
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if !slices.Equal(obs.KeyIDs, []string{cred.AccessKeyID}) {
		t.Errorf("user %q has keys %q, want only [%s]", user, obs.KeyIDs, cred.AccessKeyID)
	}
}
