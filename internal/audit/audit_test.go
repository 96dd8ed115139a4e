package audit_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/bucket"
	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// The built-in catalog's service and standard plan.
const (
	serviceID = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	planStd   = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
)

// The external server, as hack/versitygw.sh start prints it.
const (
	envS3Endpoint  = "BUCKETBROKER_TEST_S3_ENDPOINT"
	envIAMEndpoint = "BUCKETBROKER_TEST_IAM_ENDPOINT"
	envAccessKey   = "BUCKETBROKER_TEST_S3_ACCESS_KEY"
	envSecretKey   = "BUCKETBROKER_TEST_S3_SECRET_KEY"
)

// One embedded server for the package: versitygw runs one per process.
var embedded s3iam.Config

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "audit-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	access, secret := "root"+randomHex(8), randomHex(20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := s3gateway.Start(ctx, s3gateway.Config{DataDir: dir, RootAccessKey: access, RootSecretKey: secret})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	embedded = s3iam.Config{S3Endpoint: gw.S3Endpoint(), IAMEndpoint: gw.IAMEndpoint(), Region: gw.Region(),
		PathStyle: true, AccessKeyID: access, SecretAccessKey: secret}
	code := m.Run()
	if err := gw.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// external is the server started by hack/versitygw.sh, from the
// environment. Unset, the test skips, except in CI, where a real server
// that silently went missing must fail the run.
func external(t *testing.T) s3iam.Config {
	t.Helper()
	names := []string{envS3Endpoint, envIAMEndpoint, envAccessKey, envSecretKey}
	var missing []string
	for _, n := range names {
		if os.Getenv(n) == "" {
			missing = append(missing, n)
		}
	}
	switch {
	case len(missing) > 0 && os.Getenv("CI") == "true":
		t.Fatalf("CI=true and %s unset: run the tests through hack/with-test-servers.sh", strings.Join(missing, ", "))
	case len(missing) == len(names):
		t.Skipf(`no external S3 server: run eval "$(hack/versitygw.sh start /tmp/vgw)" to set %s`, strings.Join(names, ", "))
	case len(missing) > 0:
		t.Fatalf("%s unset: set all four (hack/versitygw.sh start prints them)", strings.Join(missing, ", "))
	}
	return s3iam.Config{S3Endpoint: os.Getenv(envS3Endpoint), IAMEndpoint: os.Getenv(envIAMEndpoint), Region: "us-east-1",
		PathStyle: true, AccessKeyID: os.Getenv(envAccessKey), SecretAccessKey: os.Getenv(envSecretKey)}
}

func TestDriftEmbedded(t *testing.T) { testDrift(t, embedded) }

func TestDriftExternal(t *testing.T) { testDrift(t, external(t)) }

// TestDriftInPages: the same findings when the store is read two records
// at a time, each record's resources and each resource's record on pages
// of their own.
func TestDriftInPages(t *testing.T) {
	audit.SetPageSize(t, 2)
	testDrift(t, embedded)
}

// world is one broker's worth of state on a real server: a store filled by
// the real engine, and root clients to change the backend behind its back.
type world struct {
	prefix string
	store  *sqlite.Store
	drv    *s3iam.Driver
	s3     *s3.Client
	iam    *iam.Client
}

func newWorld(t *testing.T, cfg s3iam.Config) *world {
	t.Helper()
	ctx := t.Context()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	drv, err := s3iam.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")
	return &world{
		// Its own prefix: the server is shared with other tests (the
		// conformance suite runs against it at the same time).
		prefix: "au" + randomHex(4),
		store:  store,
		drv:    drv,
		s3: s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: cfg.Region, BaseEndpoint: &cfg.S3Endpoint, UsePathStyle: true, Credentials: creds,
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired}),
		iam: iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: &cfg.IAMEndpoint, Credentials: creds}),
	}
}

// engine runs fn with a started engine on the world's store and server,
// and stops the engine after it.
func (w *world) engine(t *testing.T, fn func(e *engine.Engine)) {
	t.Helper()
	key := make([]byte, secretbox.KeySize)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := bucket.New(bucket.Options{Driver: w.drv, Catalog: catalog.Default(), Prefix: w.prefix})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: w.store, Backends: []engine.Backend{bb}, Catalog: catalog.Default(), Box: box,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	fn(e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func (w *world) provision(t *testing.T, e *engine.Engine, id string) {
	t.Helper()
	if _, err := e.Provision(t.Context(), engine.ProvisionRequest{InstanceID: id, ServiceID: serviceID, PlanID: planStd}); err != nil {
		t.Fatalf("provision %s: %v", id, err)
	}
}

func (w *world) bind(t *testing.T, e *engine.Engine, instanceID, id string) *engine.Credentials {
	t.Helper()
	res, err := e.Bind(t.Context(), engine.BindRequest{InstanceID: instanceID, BindingID: id, ServiceID: serviceID, PlanID: planStd})
	if err != nil || res.Credentials == nil {
		t.Fatalf("bind %s: %+v, %v", id, res, err)
	}
	return res.Credentials
}

func (w *world) bucket(id string) string {
	return driver.BucketName(w.prefix, string(engine.KindInstance), id)
}
func (w *world) user(id string) string {
	return driver.UserName(w.prefix, string(engine.KindBinding), id)
}

// removeAfter deletes, with the root keys, whatever the test left of
// these buckets and users, so that the shared server ends as it began.
func (w *world) removeAfter(t *testing.T, buckets, users []string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, b := range buckets {
			out, err := w.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &b})
			if err != nil {
				continue // gone
			}
			for _, o := range out.Contents {
				_, _ = w.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: o.Key})
			}
			_, _ = w.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &b})
		}
		for _, u := range users {
			keys, err := w.iam.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: &u})
			if err != nil {
				continue // gone
			}
			for _, k := range keys.AccessKeyMetadata {
				_, _ = w.iam.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: &u, AccessKeyId: k.AccessKeyId})
			}
			_, _ = w.iam.DeleteUserPolicy(ctx, &iam.DeleteUserPolicyInput{UserName: &u, PolicyName: aws.String(s3iam.PolicyName)})
			_, _ = w.iam.DeleteUser(ctx, &iam.DeleteUserInput{UserName: &u})
		}
	})
}

// short is a finding reduced to what the test pins down.
type short struct {
	Kind     audit.Kind
	Resource string
	Name     string
	Record   string
	Fixed    bool
}

func shorten(fs []audit.Finding) []short {
	var out []short
	for _, f := range fs {
		out = append(out, short{f.Kind, f.Resource, f.Name, f.Record, f.Fixed})
	}
	return out
}

// testDrift makes each kind of drift on a real server behind a real
// engine's back, and checks that the audit finds exactly it, that Fix
// removes exactly the leaks and the unknown key, and that a second audit
// finds only the missing bucket, which is not Fix's to make again.
func testDrift(t *testing.T, cfg s3iam.Config) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, cfg)

	// The broker's own work: two instances, one binding, and a third
	// instance provisioned and deprovisioned (its record is a tombstone).
	var cred *engine.Credentials
	w.engine(t, func(e *engine.Engine) {
		w.provision(t, e, "kept")
		w.provision(t, e, "lost")
		w.provision(t, e, "gone")
		cred = w.bind(t, e, "kept", "app")
		if _, err := e.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "gone", ServiceID: serviceID, PlanID: planStd}); err != nil {
			t.Fatalf("deprovision gone: %v", err)
		}
	})

	leakedBucket := w.bucket("leaked")
	leakedUser := w.user("leaked")
	claimBucket := driver.BucketName(w.prefix, "claim", "uid-1")
	busyBucket := w.bucket("busy")
	foreignBucket := w.prefix + "-foreign-data"
	foreignUser := w.prefix + "-foreign-user"
	w.removeAfter(t, []string{w.bucket("kept"), w.bucket("lost"), w.bucket("gone"), leakedBucket, claimBucket, busyBucket, foreignBucket},
		[]string{w.user("app"), leakedUser, foreignUser})

	// Missing: the bucket of a ready instance, deleted behind its back.
	if _, err := w.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(w.bucket("lost"))}); err != nil {
		t.Fatalf("root: delete bucket of instance lost: %v", err)
	}
	// Leaks: a marked bucket and user no record knows, and a bucket that
	// outlived its deprovisioned instance.
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: leakedBucket, Owner: driver.OwnerMark("instance", "leaked")}))
	_, err := w.drv.EnsureCredential(ctx, driver.CredentialSpec{UserName: leakedUser, Owner: driver.OwnerMark("binding", "leaked"),
		Bucket: w.bucket("kept"), Access: driver.AccessReadOnly})
	must(t, err)
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: w.bucket("gone"), Owner: driver.OwnerMark("instance", "gone")}))
	// Unknown key: a second key for the bound user.
	extra, err := w.iam.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(w.user("app"))})
	must(t, err)
	extraKey := aws.ToString(extra.AccessKey.AccessKeyId)
	// Not ours, never to be touched: an unmarked bucket holding data and
	// an unmarked user, both under our prefix; a bucket of a Kubernetes
	// claim, whose records are not in this store.
	_, err = w.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &foreignBucket})
	must(t, err)
	_, err = w.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &foreignBucket, Key: aws.String("theirs"), Body: strings.NewReader("x")})
	must(t, err)
	_, err = w.iam.CreateUser(ctx, &iam.CreateUserInput{UserName: &foreignUser, Path: aws.String(s3iam.UserPath)})
	must(t, err)
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: claimBucket, Owner: driver.OwnerMark("claim", "uid-1")}))
	// In progress: a provision the engine is still driving (a record
	// written, its bucket made, the operation not finished).
	busy := &engine.Record{Kind: engine.KindInstance, ID: "busy", Phase: engine.PhaseProvisioning, Backend: "bucket",
		Bucket: &engine.BucketState{Bucket: busyBucket, Owner: driver.OwnerMark("instance", "busy"), BucketAttempted: true},
		Op:     engine.Operation{ID: "op-busy", Type: engine.OpProvision, State: engine.OpInProgress, StartedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}}
	must(t, w.store.Insert(ctx, busy))
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: busyBucket, Owner: busy.Bucket.Owner}))
	// An upstream broker's instance (upstream mode): no bucket to judge.
	up := &engine.Record{Kind: engine.KindInstance, ID: "up", Phase: engine.PhaseReady, Backend: "db", Upstream: &engine.UpstreamState{Attempted: true},
		Op: engine.Operation{ID: "op-up", Type: engine.OpProvision, State: engine.OpSucceeded, StartedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}}
	must(t, w.store.Insert(ctx, up))

	opts := audit.Options{Store: w.store, Driver: w.drv, Prefix: w.prefix}
	rep, err := audit.Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []short{
		{audit.KindLeak, audit.ResourceBucket, w.bucket("gone"), "", false},
		{audit.KindLeak, audit.ResourceBucket, leakedBucket, "", false},
		{audit.KindLeak, audit.ResourceUser, leakedUser, "", false},
		{audit.KindMissing, audit.ResourceBucket, w.bucket("lost"), "instance/lost", false},
		{audit.KindUnknownKey, audit.ResourceKey, extraKey, "binding/app", false},
	}
	if diff := cmp.Diff(want, shorten(rep.Findings)); diff != "" {
		t.Errorf("first audit findings: -want +got:\n%s", diff)
	}
	if !rep.Drift() {
		t.Errorf("first audit: Drift() = false, want true")
	}
	var text strings.Builder
	must(t, rep.WriteText(&text))
	for _, want := range []string{"leak", "missing", "unknown-key", "instance/busy", "not kept in this store", "deprovision and provision"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report does not mention %q:\n%s", want, text.String())
		}
	}
	t.Logf("first audit:\n%s", text.String())
	wantSkipped := []audit.Skipped{
		{Record: "instance/busy"},
		{Resource: audit.ResourceBucket, Name: claimBucket},
		{Record: "instance/up"},
	}
	for _, s := range rep.Skipped {
		if s.Record == "instance/up" && !strings.Contains(s.Reason, `upstream "db"`) {
			t.Errorf("upstream record skipped because %q, want it named as the upstream's", s.Reason)
		}
	}
	var gotSkipped []audit.Skipped
	for _, s := range rep.Skipped {
		gotSkipped = append(gotSkipped, audit.Skipped{Record: s.Record, Resource: s.Resource, Name: s.Name})
	}
	if diff := cmp.Diff(wantSkipped, gotSkipped); diff != "" {
		t.Errorf("first audit not judged: -want +got:\n%s", diff)
	}

	if err := audit.Fix(ctx, opts, rep); err != nil {
		t.Fatalf("Fix: %v", err)
	}
	for i := range want {
		want[i].Fixed = want[i].Kind != audit.KindMissing
	}
	if diff := cmp.Diff(want, shorten(rep.Findings)); diff != "" {
		t.Errorf("after Fix: -want +got:\n%s\nactions: %+v", diff, rep.Findings)
	}

	again, err := audit.Run(ctx, opts)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	wantAgain := []short{{audit.KindMissing, audit.ResourceBucket, w.bucket("lost"), "instance/lost", false}}
	if diff := cmp.Diff(wantAgain, shorten(again.Findings)); diff != "" {
		t.Errorf("second audit findings: -want +got:\n%s", diff)
	}

	// What the backend holds now, seen with the root keys.
	for name, exists := range map[string]bool{
		w.bucket("kept"): true, foreignBucket: true, claimBucket: true, busyBucket: true,
		w.bucket("gone"): false, leakedBucket: false, w.bucket("lost"): false,
	} {
		_, err := w.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name})
		if (err == nil) != exists {
			t.Errorf("bucket %s: head error %v, want exists=%v", name, err, exists)
		}
	}
	if _, err := w.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &foreignBucket, Key: aws.String("theirs")}); err != nil {
		t.Errorf("foreign object: %v, want it untouched", err)
	}
	if _, err := w.iam.GetUser(ctx, &iam.GetUserInput{UserName: &foreignUser}); err != nil {
		t.Errorf("foreign user: %v, want it untouched", err)
	}
	if _, err := w.iam.GetUser(ctx, &iam.GetUserInput{UserName: &leakedUser}); err == nil {
		t.Errorf("leaked user %s still exists", leakedUser)
	}
	keys, err := w.iam.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: aws.String(w.user("app"))})
	must(t, err)
	var ids []string
	for _, k := range keys.AccessKeyMetadata {
		ids = append(ids, aws.ToString(k.AccessKeyId))
	}
	if !slices.Equal(ids, []string{cred.AccessKeyID}) {
		t.Errorf("keys of the bound user = %q, want only the recorded %s", ids, cred.AccessKeyID)
	}
}

// TestFixLeavesNonEmptyBucket checks that a leaked bucket holding objects
// is deleted only with Purge.
func TestFixLeavesNonEmptyBucket(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, embedded)
	name := w.bucket("full")
	w.removeAfter(t, []string{name}, nil)
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: driver.OwnerMark("instance", "full")}))
	_, err := w.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("k"), Body: strings.NewReader("x")})
	must(t, err)

	for _, purge := range []bool{false, true} {
		opts := audit.Options{Store: w.store, Driver: w.drv, Prefix: w.prefix, Purge: purge}
		rep, err := audit.Run(ctx, opts)
		must(t, err)
		must(t, audit.Fix(ctx, opts, rep))
		want := []short{{audit.KindLeak, audit.ResourceBucket, name, "", purge}}
		if diff := cmp.Diff(want, shorten(rep.Findings)); diff != "" {
			t.Errorf("purge=%v: -want +got:\n%s", purge, diff)
		}
		if rep.Drift() == purge {
			t.Errorf("purge=%v: Drift() = %v", purge, rep.Drift())
		}
	}
}

// TestFixRechecksTheStore checks that a leak a record claims between the
// audit and the fix (a provision under the same id) is left alone.
func TestFixRechecksTheStore(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, embedded)
	name := w.bucket("late")
	w.removeAfter(t, []string{name}, nil)
	must(t, w.drv.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: driver.OwnerMark("instance", "late")}))
	opts := audit.Options{Store: w.store, Driver: w.drv, Prefix: w.prefix}
	rep, err := audit.Run(ctx, opts)
	must(t, err)
	w.engine(t, func(e *engine.Engine) { w.provision(t, e, "late") })
	must(t, audit.Fix(ctx, opts, rep))
	if len(rep.Findings) != 1 || rep.Findings[0].Fixed || !strings.Contains(rep.Findings[0].Action, "instance/late now carries its mark") {
		t.Errorf("findings after Fix = %+v, want the leak left because instance/late now owns it", rep.Findings)
	}
	if _, err := w.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name}); err != nil {
		t.Errorf("bucket %s: %v, want it kept for instance late", name, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRefusesUnreadableRecords: the store's List skips a record it cannot
// decode, so an audit without it would take its binding's user for a leak
// and --fix would delete a credential the platform holds. The audit refuses
// to judge until the record is repaired.
func TestRefusesUnreadableRecords(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := &engine.Record{Kind: engine.KindBinding, ID: "b1", InstanceID: "i1", Fingerprint: "fp", Phase: engine.PhaseReady,
		Op: engine.Operation{ID: "op", Type: engine.OpBind, State: engine.OpSucceeded}}
	if err := st.Insert(ctx, rec); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deep := strings.Repeat(`{"a":`, 10000) + `{}` + strings.Repeat(`}`, 10000)
	if _, err := db.Exec(`UPDATE records SET data = replace(data, '"fingerprint":', '"x":' || ? || ',"fingerprint":')`, deep); err != nil {
		t.Fatal(err)
	}
	drv, err := s3iam.New(embedded)
	if err != nil {
		t.Fatal(err)
	}
	_, err = audit.Run(ctx, audit.Options{Store: st, Driver: drv, Prefix: "bbunread"})
	if err == nil || !strings.Contains(err.Error(), "cannot read") || !strings.Contains(err.Error(), "binding b1") {
		t.Fatalf("audit with an unreadable record: %v, want a refusal naming it", err)
	}
}
