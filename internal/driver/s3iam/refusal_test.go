package s3iam

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// badTags are tag sets S3 refuses, one of each kind.
func badTags() map[string]map[string]string {
	fifty := map[string]string{}
	for i := range 50 {
		fifty[fmt.Sprintf("k%d", i)] = "v"
	}
	return map[string]map[string]string{
		"snowman":                   {"k": "☃"},
		"ampersand":                 {"k": "a&b"},
		"control character":         {"k": "a\x01b"},
		"tab":                       {"k": "a\tb"},
		"256 characters, 512 bytes": {"k": strings.Repeat("ü", 256)},
		"value of 257 bytes":        {"k": strings.Repeat("x", 257)},
		"key of 129 bytes":          {strings.Repeat("k", 129): "v"},
		"snowman in the key":        {"☃": "v"},
		"50 beside the owner mark":  fifty,
	}
}

// TestEnsureBucketInvalidTags: tags the server would refuse are refused
// before any call, so that no bucket is created (the server can only
// refuse them in PutBucketTagging, after CreateBucket), with an error that
// wraps driver.ErrInvalid.
func TestEnsureBucketInvalidTags(t *testing.T) {
	d := newDriver(t, serverConfig())
	for name, tags := range badTags() {
		t.Run(name, func(t *testing.T) {
			bucket := driver.BucketName("bbtest", "badtag", randomHex(8))
			err := d.EnsureBucket(context.Background(), driver.BucketSpec{Name: bucket, Owner: "o", Tags: tags})
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("EnsureBucket: %v, want ErrInvalid", err)
			}
			obs, err := d.Observe(context.Background(), driver.ObserveRequest{Bucket: bucket})
			if err != nil || obs.BucketExists {
				t.Errorf("after the refusal: Observe = %+v, %v; want no bucket", obs, err)
			}
		})
	}
}

// TestServerRefusesWhatCheckTagsRefuses holds driver.CheckTags to the
// server: every tag set it lets through, the server takes, and each of the
// sets it refuses the server refuses too (so that the limits the door
// states are the backend's real ones). And the server's refusal, for good,
// is driver.ErrInvalid with a plain text: the server's code and message,
// without the SDK's request and host ids, since the engine shows it to the
// platform's user.
func TestServerRefusesWhatCheckTagsRefuses(t *testing.T) {
	d := newDriver(t, serverConfig())
	ctx := context.Background()
	bucket := driver.BucketName("bbtest", "tagcheck", randomHex(8))
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: bucket, Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	defer d.DeleteBucket(ctx, bucket, "o", false) //nolint:errcheck // best effort
	good := map[string]map[string]string{
		"letters of any script": {"name": "Größe über 5 ünd 日本"},
		"punctuation":           {"k": "a_b.c:d/e=f+g-h@i j"},
		"value of 256 bytes":    {"k": strings.Repeat("x", 256)},
		"key of 128 bytes":      {strings.Repeat("k", 128): ""},
	}
	for name, tags := range good {
		t.Run("good "+name, func(t *testing.T) {
			if err := driver.CheckTags(tags, 1); err != nil {
				t.Fatalf("CheckTags: %v", err)
			}
			want := map[string]string{OwnerTagKey: "o"}
			for k, v := range tags {
				want[k] = v
			}
			if err := d.putBucketTags(ctx, bucket, want); err != nil {
				t.Errorf("the server refuses what CheckTags lets through: %v", err)
			}
		})
	}
	for name, tags := range badTags() {
		t.Run("bad "+name, func(t *testing.T) {
			if err := driver.CheckTags(tags, 1); err == nil {
				t.Errorf("CheckTags lets it through")
			}
			want := map[string]string{OwnerTagKey: "o"}
			for k, v := range tags {
				want[k] = v
			}
			err := d.putBucketTags(ctx, bucket, want)
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("the server's answer: %v, want a refusal wrapping ErrInvalid", err)
			}
			for _, noise := range []string{"RequestID", "HostID", "StatusCode", "operation error"} {
				if strings.Contains(err.Error(), noise) {
					t.Errorf("refusal %q carries the SDK's %s", err, noise)
				}
			}
			if !strings.Contains(err.Error(), `tag bucket "`+bucket+`"`) {
				t.Errorf("refusal %q does not say what was being done", err)
			}
		})
	}
}
