package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// TestRemovedMarkIsNeverDeleted: the S3 root user removes the owner mark
// of an instance's bucket and of a binding's user. The record says both
// were created and marked, so the missing mark is someone's change, not a
// crash's: the unbind (synchronous) fails naming the user and what to do,
// the deprovision (asynchronous, with purge_on_delete) fails naming the
// bucket, the audit reports both as mark-lost, and nothing is deleted.
// Once the marks are put back, the unbind and the deprovision finish.
func TestRemovedMarkIsNeverDeleted(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/unmarked"
	bind := inst + "/service_bindings/app"
	body := maps.Clone(provisionBody)
	body["parameters"] = map[string]any{"purge_on_delete": true}
	untilDone(t, b, "PUT", inst, body, http.StatusCreated)
	c := untilDone(t, b, "PUT", bind, bindBody, http.StatusCreated).Creds()
	bucket, _ := c["bucket"].(string)
	if err := b.Backend.Put(c, "data.txt", "keep me"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := credentials.NewStaticCredentialsProvider(b.Backend.AccessKey, b.Backend.SecretKey, "")
	s3c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.S3), UsePathStyle: true, Credentials: root})
	iamc := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.IAM), Credentials: root})
	users, err := iamc.ListUsers(ctx, &iam.ListUsersInput{PathPrefix: aws.String("/bucketbroker/")})
	if err != nil || len(users.Users) != 1 {
		t.Fatalf("ListUsers: %v, %v; want the binding's user alone", users, err)
	}
	user := aws.ToString(users.Users[0].UserName)

	// The marks, as the broker wrote them, then removed by the root user.
	bucketTags, err := s3c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	userTags, err := iamc.ListUserTags(ctx, &iam.ListUserTagsInput{UserName: &user})
	if err != nil || len(userTags.Tags) == 0 {
		t.Fatalf("ListUserTags: %v, %v; want the owner mark", userTags, err)
	}
	if _, err := s3c.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	var tagKeys []string
	for _, tag := range userTags.Tags {
		tagKeys = append(tagKeys, aws.ToString(tag.Key))
	}
	if _, err := iamc.UntagUser(ctx, &iam.UntagUserInput{UserName: &user, TagKeys: tagKeys}); err != nil {
		t.Fatal(err)
	}

	r := b.Do("DELETE", bind+deleteQuery, nil)
	if r.Err != nil || r.Code != http.StatusInternalServerError || !strings.Contains(r.Description(), user) || !strings.Contains(r.Description(), "unbind again") {
		t.Errorf("unbind of a user whose mark was removed: %s; want 500 naming user %s and what to do", r, user)
	}
	wantUser(ctx, t, iamc, user)

	b.Stop()
	code, out, err := b.Audit()
	if err != nil || code != 2 {
		t.Errorf("audit: exit %d, %v; want 2 (drift)\n%s", code, err, out)
	}
	found := auditFindings(t, out)
	for _, want := range []string{"bucket " + bucket, "user " + user} {
		if found[want] != "mark-lost" {
			t.Errorf("audit finding of %s = %q, want mark-lost; all: %v\n%s", want, found[want], found, out)
		}
	}
	b.Start()

	if _, err := iamc.TagUser(ctx, &iam.TagUserInput{UserName: &user, Tags: userTags.Tags}); err != nil {
		t.Fatal(err)
	}
	untilDone(t, b, "DELETE", bind+deleteQuery, nil, http.StatusOK)

	r = untilDone(t, b, "DELETE", inst+deleteQuery+"&accepts_incomplete=true", nil, http.StatusAccepted)
	last, err := b.LastOperation(time.Minute, inst, r.Operation())
	if err != nil || last.State() != "failed" || !strings.Contains(last.Description(), bucket) || !strings.Contains(last.Description(), "deprovision again") {
		t.Errorf("deprovision of a bucket whose mark was removed: last_operation %s, %v; want failed, naming bucket %s and what to do", last, err, bucket)
	}
	objects, err := b.Backend.Objects(bucket)
	if err != nil || len(objects) != 1 {
		t.Errorf("objects of bucket %s after the failed deprovision: %q, %v; want data.txt kept", bucket, objects, err)
	}

	if _, err := s3c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: &bucket,
		Tagging: &s3types.Tagging{TagSet: bucketTags.TagSet}}); err != nil {
		t.Fatal(err)
	}
	r = untilDone(t, b, "DELETE", inst+deleteQuery+"&accepts_incomplete=true", nil, http.StatusAccepted)
	if last, err := b.LastOperation(time.Minute, inst, r.Operation()); err != nil || last.State() != "succeeded" {
		t.Errorf("deprovision with the mark put back: %s, %v; want succeeded", last, err)
	}
	if got := buckets(t, b); len(got) != 0 {
		t.Errorf("buckets after the deprovision: %q, want none", got)
	}
}

func wantUser(ctx context.Context, t *testing.T, c *iam.Client, user string) {
	t.Helper()
	if _, err := c.GetUser(ctx, &iam.GetUserInput{UserName: &user}); err != nil {
		t.Errorf("user %s: %v, want it kept", user, err)
		return
	}
	keys, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: &user})
	if err != nil || len(keys.AccessKeyMetadata) != 1 || keys.AccessKeyMetadata[0].Status != iamtypes.StatusTypeActive {
		t.Errorf("keys of user %s: %v, %v; want its one key kept", user, keys, err)
	}
}

// auditFindings maps "<resource> <name>" to the kind of its finding, from
// admin audit's JSON report in out (which holds its log lines too).
func auditFindings(t *testing.T, out string) map[string]string {
	t.Helper()
	i := strings.Index(out, "{\n")
	if i < 0 {
		t.Fatalf("no JSON report in the audit's output:\n%s", out)
	}
	var rep struct {
		Findings []struct{ Kind, Resource, Name string }
	}
	if err := json.NewDecoder(strings.NewReader(out[i:])).Decode(&rep); err != nil {
		t.Fatalf("decode the audit's report: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, f := range rep.Findings {
		m[f.Resource+" "+f.Name] = f.Kind
	}
	return m
}
