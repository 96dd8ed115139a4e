package e2e

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// The TestMinIO tests run the binary on --driver minio against a real
// MinIO server (hack/minio.sh; make test-minio) and check what the other
// e2e tests check on the embedded server, by S3 calls with the keys the
// broker handed out. Each test names its buckets and users under a prefix
// of its own: the server is shared.

// minioBroker returns a broker (not started) on the minio driver.
func minioBroker(t *testing.T) *harness.Broker {
	t.Helper()
	return harness.MinIO(t, binary, harness.MinIOBackend(t, "m"+randomHex(4)))
}

// refused reports whether err is the server's 403 (an unknown key or a
// policy's denial), not a transport failure that would hide a key that
// still works.
func refused(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden
}

// TestMinIOFlow: the OSB flow end to end on MinIO. Provision, synchronous
// and asynchronous, and replays answered 200; bindings read-write and
// read-only; each key works in its own bucket only and a read-only key
// cannot write; an unbind stops the key at once; a deprovision of a bucket
// that holds objects is refused with what to do and deletes nothing; with
// purge_on_delete the bucket goes with its objects.
func TestMinIOFlow(t *testing.T) {
	b := minioBroker(t)
	b.Start()

	// Provision: synchronous, then asynchronous on standard-async.
	a := "/v2/service_instances/a"
	if r := b.Do("PUT", a, provisionBody); r.Err != nil || r.Code != http.StatusCreated {
		t.Fatalf("provision: %s, want 201", r)
	}
	if r := b.Do("PUT", a, provisionBody); r.Err != nil || r.Code != http.StatusOK {
		t.Errorf("provision replayed: %s, want 200", r)
	}
	async := "/v2/service_instances/async"
	ab := maps.Clone(provisionBody)
	ab["plan_id"] = planAsync
	ab["parameters"] = map[string]any{"purge_on_delete": true}
	r := b.Do("PUT", async+"?"+incomplete, ab)
	if r.Err != nil || r.Code != http.StatusAccepted || r.Operation() == "" {
		t.Fatalf("async provision: %s, want 202 with an operation", r)
	}
	if p, err := b.LastOperation(time.Minute, async, r.Operation()); err != nil || p.State() != "succeeded" {
		t.Fatalf("async provision: last_operation %s, %v; want succeeded", p, err)
	}
	if r := b.Do("PUT", async+"?"+incomplete, ab); r.Err != nil || r.Code != http.StatusOK {
		t.Errorf("async provision replayed after it succeeded: %s, want 200", r)
	}

	// Bindings: a read-write one (a replay answers the same key) and a
	// read-only one on a, and a read-write one on async.
	rw := a + "/service_bindings/rw"
	first := b.Do("PUT", rw, bindBody)
	if first.Err != nil || first.Code != http.StatusCreated {
		t.Fatalf("bind: %s, want 201", first)
	}
	c := first.Creds()
	if again := b.Do("PUT", rw, bindBody); again.Err != nil || again.Code != http.StatusOK ||
		again.Creds()["access_key_id"] != c["access_key_id"] || again.Creds()["secret_access_key"] != c["secret_access_key"] {
		t.Errorf("bind replayed: %d %v, want 200 with the same key", again.Code, again.Err)
	}
	roBody := maps.Clone(bindBody)
	roBody["parameters"] = map[string]any{"access": "read-only"}
	ro := untilDone(t, b, "PUT", a+"/service_bindings/ro", roBody, http.StatusCreated).Creds()
	other := untilDone(t, b, "PUT", async+"/service_bindings/app", bindBody, http.StatusCreated).Creds()
	if c["bucket"] == other["bucket"] {
		t.Fatalf("two instances share bucket %v", c["bucket"])
	}
	if got := len(buckets(t, b)); got != 2 {
		t.Errorf("%d buckets, want 2", got)
	}
	nk := 0
	for _, ks := range keys(t, b) {
		nk += len(ks)
	}
	if nk != 3 {
		t.Errorf("%d keys, want 3 (one per binding): %v", nk, keys(t, b))
	}

	// Each key in its own bucket, and only there.
	if err := b.Backend.Put(c, "data.txt", "hello"); err != nil {
		t.Fatalf("the read-write key in its bucket: %v", err)
	}
	if got, err := b.Backend.Get(c, "data.txt"); err != nil || got != "hello" {
		t.Errorf("the read-write key reads back %q, %v", got, err)
	}
	if got, err := b.Backend.Get(ro, "data.txt"); err != nil || got != "hello" {
		t.Errorf("the read-only key reads %q, %v; want hello", got, err)
	}
	if err := b.Backend.Put(ro, "ro.txt", "x"); !refused(err) {
		t.Errorf("a write with the read-only key: %v, want 403", err)
	}
	if err := b.Backend.Put(other, "theirs.txt", "x"); err != nil {
		t.Fatalf("async's key in its bucket: %v", err)
	}
	intruder := maps.Clone(c)
	intruder["bucket"] = other["bucket"]
	if err := b.Backend.Put(intruder, "intruder.txt", "x"); !refused(err) {
		t.Errorf("a write with a's key into async's bucket: %v, want 403", err)
	}
	if _, err := b.Backend.Get(intruder, "theirs.txt"); !refused(err) {
		t.Errorf("a read with a's key from async's bucket: %v, want 403", err)
	}

	// Unbind: the very next request with the key is refused.
	if r := b.Do("DELETE", rw+deleteQuery, nil); r.Err != nil || r.Code != http.StatusOK {
		t.Fatalf("unbind: %s, want 200", r)
	}
	if _, err := b.Backend.Get(c, "data.txt"); !refused(err) {
		t.Errorf("a read with the key right after its unbind: %v, want 403", err)
	}
	if r := b.Do("DELETE", rw+deleteQuery, nil); r.Err != nil || r.Code != http.StatusGone {
		t.Errorf("unbind replayed: %s, want 410", r)
	}
	untilDone(t, b, "DELETE", a+"/service_bindings/ro"+deleteQuery, nil, http.StatusOK)

	// Deprovision of a bucket that holds an object, without purge_on_delete:
	// refused, naming what to do, and nothing deleted.
	r = b.Do("DELETE", a+deleteQuery, nil)
	if r.Err != nil || r.Code < 400 || !strings.Contains(r.Description(), "purge_on_delete") || !strings.Contains(r.Description(), "deprovision again") {
		t.Errorf("deprovision of a non-empty bucket: %s; want an error that names purge_on_delete and deprovision again", r)
	}
	bucketA, _ := c["bucket"].(string)
	if objs, err := b.Backend.Objects(bucketA); err != nil || len(objs) != 1 {
		t.Errorf("objects of %s after the refused deprovision: %q, %v; want data.txt kept", bucketA, objs, err)
	}

	// With purge_on_delete (async was provisioned with it): the bucket
	// goes, objects and all.
	untilDone(t, b, "DELETE", async+"/service_bindings/app"+deleteQuery, nil, http.StatusOK)
	r = b.Do("DELETE", async+deleteQuery+"&"+incomplete, nil)
	if r.Err != nil || r.Code != http.StatusAccepted {
		t.Fatalf("deprovision with purge_on_delete: %s, want 202", r)
	}
	if p, err := b.LastOperation(time.Minute, async, r.Operation()); err != nil || p.State() != "succeeded" {
		t.Fatalf("deprovision with purge_on_delete: last_operation %s, %v; want succeeded", p, err)
	}
	if got := buckets(t, b); len(got) != 1 || got[0] != bucketA {
		t.Errorf("buckets after the purge: %q, want only %s", got, bucketA)
	}
	if m := keys(t, b); len(m) != 0 {
		t.Errorf("users after every unbind: %v, want none", m)
	}
	if r := b.Do("DELETE", async+deleteQuery+"&"+incomplete, nil); r.Err != nil || r.Code != http.StatusGone {
		t.Errorf("deprovision replayed: %s, want 410", r)
	}
}

// TestMinIOCrashPoints: the broker dies at a crash point (the process
// exits at once, nothing deferred runs, as under kill -9) in the middle of
// a provision, right after MinIO created the bucket (bucket/created-unmarked)
// or once the bucket is done and before the record says so
// (provision/bucket-created), or of a bind, after MinIO made the key and
// before the record holds it (bind/key-created). Restarted, the platform's retry converges: one
// bucket, one key that works, and the audit finds no drift (no stray key).
func TestMinIOCrashPoints(t *testing.T) {
	inst := "/v2/service_instances/crash"
	bind := inst + "/service_bindings/app"
	for _, tc := range []struct {
		point crashpoint.Point
		path  string
		body  map[string]any
	}{
		{crashpoint.BucketCreatedUnmarked, inst, provisionBody},
		{crashpoint.ProvisionBucketCreated, inst, provisionBody},
		{crashpoint.BindKeyCreated, bind, bindBody},
	} {
		t.Run(string(tc.point), func(t *testing.T) {
			b := minioBroker(t)
			if tc.path == bind {
				b.Start()
				untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
				b.Stop()
			}
			b.Start(string(tc.point))
			path := tc.path + "?" + incomplete
			if r := b.Do("PUT", path, tc.body); r.Err == nil && r.Code != http.StatusAccepted {
				t.Fatalf("the call answered %s; want 202 or no answer (the process dies at %s)", r, tc.point)
			}
			b.WaitCrash()
			if got := len(buckets(t, b)); got != 1 {
				t.Fatalf("%d buckets after the crash, want the 1 made before it", got)
			}
			b.Start()
			r := untilDone(t, b, "PUT", path, tc.body, http.StatusAccepted, http.StatusOK)
			if r.Code == http.StatusAccepted {
				if p, err := b.LastOperation(time.Minute, tc.path, r.Operation()); err != nil || p.State() != "succeeded" {
					t.Fatalf("resumed operation: %s, %v; want succeeded", p, err)
				}
			}
			untilDone(t, b, "PUT", path, tc.body, http.StatusOK)
			want := http.StatusOK
			if tc.path == inst {
				want = http.StatusCreated
			}
			c := untilDone(t, b, "PUT", bind, bindBody, want).Creds()
			if err := b.Backend.Works(c); err != nil {
				t.Errorf("the binding's key: %v", err)
			}
			if got := len(buckets(t, b)); got != 1 {
				t.Errorf("%d buckets, want 1", got)
			}
			if m := keys(t, b); len(m) != 1 || len(slices.Concat(slices.Collect(maps.Values(m))...)) != 1 {
				t.Errorf("users and keys %v, want one user with one key", m)
			}
			if code, out, err := b.Audit(); code != 0 || err != nil {
				t.Errorf("audit: %d %v\n%s", code, err, out)
			}
		})
	}
}

// TestMinIOAudit: admin audit on --driver minio. A clean broker reports
// nothing. A broker whose store was lost (its data dir removed) leaves its
// bucket and user behind under the same prefix, marked: reported as
// leaks. A bucket and a user made by hand under the prefix carry no mark:
// neither reported nor touched. --fix deletes the leaks and nothing else.
func TestMinIOAudit(t *testing.T) {
	be := harness.MinIOBackend(t, "m"+randomHex(4))
	b := harness.MinIO(t, binary, be)
	b.Start()
	inst := "/v2/service_instances/live"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	live := untilDone(t, b, "PUT", inst+"/service_bindings/app", bindBody, http.StatusCreated).Creds()
	if code, out, err := b.Audit(); code != 0 || err != nil {
		t.Fatalf("audit of a clean broker: %d %v\n%s", code, err, out)
	}

	lost := harness.MinIO(t, binary, be)
	lost.Start()
	untilDone(t, lost, "PUT", "/v2/service_instances/lost", provisionBody, http.StatusCreated)
	lc := untilDone(t, lost, "PUT", "/v2/service_instances/lost/service_bindings/lost-app", bindBody, http.StatusCreated).Creds()
	lost.Stop()
	if err := os.RemoveAll(lost.DataDir); err != nil {
		t.Fatal(err)
	}
	leakedBucket, _ := lc["bucket"].(string)
	leakedUser := driver.UserName(be.Prefix, string(engine.KindBinding), "lost-app")
	if _, ok := keys(t, b)[leakedUser]; !ok {
		t.Fatalf("no user %s, the lost binding's: %v", leakedUser, keys(t, b))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	handBucket, handUser := be.Prefix+"-by-hand", be.Prefix+"-by-hand-user"
	root := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(be.S3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(be.AccessKey, be.SecretKey, "")})
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &handBucket}); err != nil {
		t.Fatal(err)
	}
	admin, err := be.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.AddUser(ctx, handUser, randomHex(16)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &handBucket})
		_ = admin.RemoveUser(ctx, handUser)
	})

	code, out, err := b.Audit()
	if err != nil || code != 2 {
		t.Fatalf("audit with leaks: exit %d, %v; want 2 (drift)\n%s", code, err, out)
	}
	found := auditFindings(t, out)
	want := map[string]string{"bucket " + leakedBucket: "leak", "user " + leakedUser: "leak"}
	if !maps.Equal(found, want) {
		t.Errorf("audit findings %v, want %v\n%s", found, want, out)
	}

	if code, out, err := b.Audit("--fix", "--yes"); err != nil || code != 0 {
		t.Fatalf("audit --fix --yes: exit %d, %v; want 0\n%s", code, err, out)
	}
	if code, out, err := b.Audit(); code != 0 || err != nil {
		t.Errorf("audit after --fix: %d %v\n%s", code, err, out)
	}
	gotBuckets := slices.Sorted(slices.Values(buckets(t, b)))
	if want := slices.Sorted(slices.Values([]string{handBucket, live["bucket"].(string)})); !slices.Equal(gotBuckets, want) {
		t.Errorf("buckets after --fix: %q, want %q (the leak gone, the rest kept)", gotBuckets, want)
	}
	users := keys(t, b)
	if _, ok := users[leakedUser]; ok {
		t.Errorf("leaked user %s kept by --fix", leakedUser)
	}
	if _, ok := users[handUser]; !ok {
		t.Errorf("user %s made by hand, without our mark, deleted by --fix: %v", handUser, users)
	}
	if err := b.Backend.Works(live); err != nil {
		t.Errorf("the live binding's key after --fix: %v", err)
	}
}
