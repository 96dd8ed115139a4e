package crash

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestMixedVerdictsCatchFaults makes by hand the faults that
// TestKillUnderMixedLoad's backend audit looks for beyond TestKillUnderLoad's,
// and checks that each gets its verdict; and that the state of issue 12's
// class 3 (a bucket whose listings are empty while its folder holds
// directories), which that test names when a purge is stuck and sets
// apart under -mixed-lenient, is told from a bucket holding objects
// (under directories too) and from an empty one.
func TestMixedVerdictsCatchFaults(t *testing.T) {
	b := harness.New(t, binary)
	b.Start()
	setup := &run{t: t, b: b, out: converged}
	var insts []*mixedInstance
	for i, role := range []mixedRole{roleKeepData, roleKeep} {
		in := &mixedInstance{chaosInstance: &chaosInstance{id: fmt.Sprintf("verdict-%d", i)}, role: role, body: harness.ProvisionBody}
		if role == roleKeepData {
			in.body = maps.Clone(harness.ProvisionBody)
			in.body["parameters"] = map[string]any{"purge_on_delete": true}
		}
		if _, ok := setup.put(in.path(), in.body, harness.Reply{}); !ok {
			t.Fatal(setup.notes)
		}
		for j := range 2 {
			bd := &chaosBinding{inst: in.chaosInstance, id: fmt.Sprintf("%s-b%d", in.id, j)}
			rep, ok := setup.put(bd.path(), harness.BindBody, harness.Reply{})
			if !ok {
				t.Fatal(setup.notes)
			}
			bd.creds = rep.Creds()
			in.bindings = append(in.bindings, bd)
		}
		if role == roleKeepData {
			for n := range 3 {
				key := mixedObjectKey(n)
				creds := in.bindings[1].creds
				if !objectOp(setup, "write "+key, func() error { return b.Backend.Put(creds, key, key) }) {
					t.Fatal(setup.notes)
				}
				in.objects = append(in.objects, key)
			}
		}
		insts = append(insts, in)
	}
	mixedDecide(setup, insts)
	if !setup.ok() {
		t.Fatal(setup.notes)
	}

	ctx := context.Background()
	root := credentials.NewStaticCredentialsProvider(b.Backend.AccessKey, b.Backend.SecretKey, "")
	s3c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.S3), UsePathStyle: true, Credentials: root})
	iamc := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.IAM), Credentials: root})
	data, plain := insts[0], insts[1]
	for _, tc := range []struct {
		name, reason string
		fault        func(t *testing.T)
		want         outcome
	}{{
		name: "as it is", reason: "live buckets with their objects and the answered keys, working in their buckets only, converge",
		fault: func(*testing.T) {}, want: converged,
	}, {
		name: "an object lost", reason: "a kept bucket missing an object the application wrote is a loss",
		fault: func(t *testing.T) {
			if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(data.bucket()), Key: aws.String(data.objects[1])}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // later cases start with it
				if err := b.Backend.Put(data.bindings[1].creds, data.objects[1], "again"); err != nil {
					t.Error(err)
				}
			})
		},
		want: lost,
	}, {
		name: "a key that reaches another bucket", reason: "a binding's key that writes into another instance's bucket leaks access",
		fault: func(t *testing.T) {
			// The binding's policy widened to every bucket.
			wide := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::*"]}]}`
			user := driver.UserName(chaosPrefix, string(engine.KindBinding), plain.bindings[1].id)
			if _, err := iamc.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String(user),
				PolicyName: aws.String(s3iam.PolicyName), PolicyDocument: aws.String(wide)}); err != nil {
				t.Fatal(err)
			}
		},
		want: leaked,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fault(t)
			r := &run{t: t, b: b, out: converged}
			mixedCheckBackend(r, insts)
			if r.out != tc.want {
				t.Errorf("%s (%s): verdict %s %v, want %s", tc.name, tc.reason, r.out, r.notes, tc.want)
			}
		})
	}

	// Class 3's shape: directories and no file in the bucket's folder.
	if why := unlistedLeftovers(b, data); why != "" {
		t.Errorf("a bucket holding objects read as class 3: %s", why)
	}
	if why := unlistedLeftovers(b, plain); why != "" {
		t.Errorf("an empty bucket read as class 3: %s", why)
	}
	if err := os.MkdirAll(filepath.Join(b.DataDir, "s3", "objects", plain.bucket(), "d0", "e1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if why := unlistedLeftovers(b, plain); why == "" {
		t.Errorf("an empty bucket whose folder holds the directories d0/e1 was not read as class 3")
	} else {
		t.Logf("class 3's shape found: %s", why)
	}
}
