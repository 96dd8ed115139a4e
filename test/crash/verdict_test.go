package crash

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestVerdictsCatchFaults makes the faults the crash table looks for by hand
// and checks that each is classified as such: a proof whose checks cannot
// fail proves nothing.
func TestVerdictsCatchFaults(t *testing.T) {
	b := harness.New(t, binary)
	b.Start()
	if _, err := b.Until(replay, "PUT", inst, harness.ProvisionBody, http.StatusCreated); err != nil {
		t.Fatal(err)
	}
	rep, err := b.Until(replay, "PUT", bind, harness.BindBody, http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	key := rep.Creds()["access_key_id"].(string)
	ctx := context.Background()
	root := credentials.NewStaticCredentialsProvider(b.Backend.AccessKey, b.Backend.SecretKey, "")
	s3c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.S3), UsePathStyle: true, Credentials: root})
	iamc := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.IAM), Credentials: root})

	cases := map[string]struct {
		reason string
		check  func(r *run)
		want   outcome
	}{
		"as it is": {
			reason: "one bucket and one user with the answered key converge",
			check:  func(r *run) { r.expectBuckets(1); r.expectKeys(key) },
			want:   converged,
		},
		"a bucket missing": {
			reason: "fewer buckets than instances is a loss",
			check:  func(r *run) { r.expectBuckets(2) },
			want:   lost,
		},
		"another key answered": {
			reason: "a live key that is not the answered one means the answer was lost",
			check:  func(r *run) { r.expectKeys("AKIANOTTHEANSWERED0") },
			want:   lost,
		},
		"a user left": {
			reason: "a user after an unbind is a leak",
			check:  func(r *run) { r.expectKeys("") },
			want:   leaked,
		},
		"a second bucket": {
			reason: "a bucket more than instances is a leak",
			check: func(r *run) {
				if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("intruder-bucket")}); err != nil {
					t.Fatal(err)
				}
				r.expectBuckets(1)
			},
			want: leaked,
		},
		"a second key": {
			reason: "a key more than the answered one is a leak",
			check: func(r *run) {
				users, err := b.Backend.Keys()
				if err != nil || len(users) != 1 {
					t.Fatalf("users %v %v", users, err)
				}
				for u := range users {
					if _, err := iamc.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(u)}); err != nil {
						t.Fatal(err)
					}
				}
				r.expectKeys(key)
			},
			want: leaked,
		},
	}
	// The backend changes in some cases: run them in an order that keeps
	// each case's premise (the intruders come last).
	for _, name := range []string{"as it is", "a bucket missing", "another key answered", "a user left", "a second bucket", "a second key"} {
		tc := cases[name]
		r := &run{t: t, b: b, out: converged}
		tc.check(r)
		if r.out != tc.want {
			t.Errorf("%s (%s): verdict %s %v, want %s", name, tc.reason, r.out, r.notes, tc.want)
		}
	}

	// An operation left in progress is stuck: die at a point and do not
	// start again.
	b.Stop()
	b.Start(string(crashpoint.ProvisionRecordWritten))
	b.Do("PUT", "/v2/service_instances/never-resumed", harness.ProvisionBody)
	b.WaitCrash()
	r := &run{t: t, b: b, out: converged}
	r.noneInProgress()
	if r.out != stuck {
		t.Errorf("an operation left in progress: verdict %s %v, want stuck", r.out, r.notes)
	}
}
