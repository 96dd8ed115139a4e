package objectbucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	restConfig *rest.Config
	testScheme *runtime.Scheme
	backend    struct {
		drv          driver.Driver
		s3URL        string
		iamURL       string
		region       string
		rootAK       string
		rootSK       string
		prefixSerial atomic.Int64
	}
)

const testPrefix = "bbt"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startBackend() (func(), error) {
	dir, err := os.MkdirTemp("", "objectbucket-s3-")
	if err != nil {
		return nil, err
	}
	backend.rootAK, backend.rootSK = "ROOT"+strings.ToUpper(randomHex(8)), randomHex(20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := s3gateway.Start(ctx, s3gateway.Config{DataDir: dir, RootAccessKey: backend.rootAK, RootSecretKey: backend.rootSK})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	backend.s3URL, backend.iamURL, backend.region = gw.S3Endpoint(), gw.IAMEndpoint(), gw.Region()
	backend.drv, err = backendDriver(nil)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.Stop(ctx)
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// backendDriver is an s3iam driver of the embedded server with its root
// keys, over hc (nil: the SDK's default HTTP client).
func backendDriver(hc *http.Client) (*s3iam.Driver, error) {
	return s3iam.New(s3iam.Config{
		S3Endpoint: backend.s3URL, IAMEndpoint: backend.iamURL, Region: backend.region, PathStyle: true,
		AccessKeyID: backend.rootAK, SecretAccessKey: backend.rootSK, HTTPClient: hc,
	})
}

// s3As is an S3 client of the embedded server with the given keys.
func s3As(ak, sk string) *s3.Client {
	return s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil),
		Region: backend.region, BaseEndpoint: aws.String(backend.s3URL), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(ak, sk, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func rootS3() *s3.Client { return s3As(backend.rootAK, backend.rootSK) }

// rootIAM is an IAM client of the embedded server with the root keys.
func rootIAM() *iam.Client {
	return iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
		Region: s3gateway.IAMRegion, BaseEndpoint: aws.String(backend.iamURL),
		Credentials: credentials.NewStaticCredentialsProvider(backend.rootAK, backend.rootSK, ""),
	})
}

// createRawUser creates an IAM user as another tool would: no owner mark,
// not under the driver's path. It is deleted when the test ends.
func createRawUser(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if _, err := rootIAM().CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(name)}); err != nil {
		t.Fatalf("create user %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = rootIAM().DeleteUser(context.Background(), &iam.DeleteUserInput{UserName: aws.String(name)})
	})
}

// bucketsWithPrefix lists the server's buckets whose name starts with p.
func bucketsWithPrefix(ctx context.Context, t *testing.T, p string) []string {
	t.Helper()
	out, err := rootS3().ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatalf("list buckets: %v", err)
	}
	var names []string
	for _, b := range out.Buckets {
		if strings.HasPrefix(aws.ToString(b.Name), p) {
			names = append(names, aws.ToString(b.Name))
		}
	}
	return names
}

func createRawBucket(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if _, err := rootS3().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

func bucketExists(ctx context.Context, t *testing.T, name string) bool {
	t.Helper()
	obs, err := backend.drv.Observe(ctx, driver.ObserveRequest{Bucket: name})
	if err != nil {
		t.Fatalf("observe bucket %s: %v", name, err)
	}
	return obs.BucketExists
}

// hookDriver wraps the real driver; a set function field replaces a call.
type hookDriver struct {
	driver.Driver
	ensureBucket      func(context.Context, driver.BucketSpec) error
	ensureCredential  func(context.Context, driver.CredentialSpec) (driver.Credential, error)
	revokeCredential  func(ctx context.Context, user, owner string) error
	ensureBucketCalls atomic.Int64
	ensureCredCalls   atomic.Int64
	observeCalls      atomic.Int64
}

func (d *hookDriver) EnsureBucket(ctx context.Context, spec driver.BucketSpec) error {
	d.ensureBucketCalls.Add(1)
	if d.ensureBucket != nil {
		return d.ensureBucket(ctx, spec)
	}
	return d.Driver.EnsureBucket(ctx, spec)
}

func (d *hookDriver) EnsureCredential(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	d.ensureCredCalls.Add(1)
	if d.ensureCredential != nil {
		return d.ensureCredential(ctx, spec)
	}
	return d.Driver.EnsureCredential(ctx, spec)
}

func (d *hookDriver) RevokeCredential(ctx context.Context, user, owner string) error {
	if d.revokeCredential != nil {
		return d.revokeCredential(ctx, user, owner)
	}
	return d.Driver.RevokeCredential(ctx, user, owner)
}

func (d *hookDriver) Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	d.observeCalls.Add(1)
	return d.Driver.Observe(ctx, req)
}

// controllerRun is one running manager with the controller.
type controllerRun struct {
	t           testing.TB
	provisioner string
	cancel      context.CancelFunc
	done        chan error
	once        sync.Once
	// warnings holds the API server's warnings to the manager's requests.
	warnings warningLog
}

// warningLog is a rest.WarningHandlerWithContext that keeps the warnings.
type warningLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningLog) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, msg string) {
	if code != 299 || msg == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

type runOptions struct {
	provisioner string
	drv         driver.Driver
	afterWrite  func(point string) error
	// rt wraps the manager's HTTP transport (request counting).
	wrap func(http.RoundTripper) http.RoundTripper
	// impersonate runs the manager as this user (RBAC tests).
	impersonate string
}

// newProvisioner returns a provisioner name of its own for a test, so that
// the managers of earlier tests' claims never meet this test's.
func newProvisioner() string {
	return fmt.Sprintf("t%d.test.bucketbroker.io/bucket", backend.prefixSerial.Add(1))
}

// startController runs a manager with the controller until the test ends or
// stop is called.
func startController(t testing.TB, o runOptions) *controllerRun {
	t.Helper()
	if o.drv == nil {
		o.drv = backend.drv
	}
	run := &controllerRun{t: t, provisioner: o.provisioner, done: make(chan error, 1)}
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.WarningHandlerWithContext = &run.warnings
	cfg.Impersonate.UserName = o.impersonate
	if o.wrap != nil {
		cfg.Wrap(o.wrap)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(o.provisioner),
	})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	r, err := NewReconciler(mgr, o.drv, Options{
		ProvisionerName: o.provisioner, Prefix: testPrefix, BucketHost: "s3.test", BucketPort: 9000,
		Region: "us-east-1", SkipNameValidation: true, MaxConcurrentReconciles: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.afterWrite = o.afterWrite
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run.cancel = cancel
	go func() { run.done <- mgr.Start(ctx) }()
	t.Cleanup(run.stop)
	return run
}

// stop cancels the manager and waits until it has stopped.
func (c *controllerRun) stop() {
	c.once.Do(func() {
		c.cancel()
		// The tests judge what the cluster ends up with, not how the manager
		// stopped; the test's log shows it.
		if err := <-c.done; err != nil {
			c.t.Logf("manager of %s stopped: %v", c.provisioner, err)
		}
	})
}

// storageClass creates a StorageClass for provisioner.
func storageClass(ctx context.Context, t *testing.T, provisioner string, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) string {
	t.Helper()
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{GenerateName: "bb-"},
		Provisioner: provisioner, Parameters: params, ReclaimPolicy: &reclaim,
	}
	if err := k8s.Create(ctx, sc); err != nil {
		t.Fatalf("create storage class: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sc) })
	return sc.Name
}

func newClaim(ns, name, class string, spec func(*obv1.ObjectBucketClaimSpec)) *obv1.ObjectBucketClaim {
	c := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: class, GenerateBucketName: name},
	}
	if spec != nil {
		spec(&c.Spec)
	}
	return c
}

func create(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// waitFor polls until cond holds or fails the test with the last state.
func waitFor(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, state := cond(ctx)
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last state: %s", what, err, last)
	}
}

func waitPhase(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim, phase obv1.Phase) *obv1.ObjectBucketClaim {
	t.Helper()
	got := &obv1.ObjectBucketClaim{}
	waitFor(ctx, t, fmt.Sprintf("claim %s/%s %s", obc.Namespace, obc.Name, phase), func(ctx context.Context) (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == phase, fmt.Sprintf("phase %q conditions %+v", got.Status.Phase, got.Status.Conditions)
	})
	return got
}

func waitGone(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%T %s gone", obj, obj.GetName()), func(ctx context.Context) (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("get: %v", err)
	})
}

// checkLeftToCollector checks what is left of a deleted claim's ConfigMap
// (envtest runs no garbage collector): nothing, or the ConfigMap with no
// finalizer and the claim's controller reference, which a cluster's
// garbage collector removes with the claim.
func checkLeftToCollector(ctx context.Context, t *testing.T, cm *corev1.ConfigMap, claim types.UID) {
	t.Helper()
	now := &corev1.ConfigMap{}
	err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), now)
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		t.Fatalf("get config map: %v", err)
	}
	ref := metav1.GetControllerOf(now)
	if len(now.Finalizers) != 0 || ref == nil || ref.UID != claim {
		t.Errorf("ConfigMap left with finalizers %v and controller %+v: the garbage collector could not remove it with claim %s", now.Finalizers, ref, claim)
	}
}

// bound is what a bound claim gave its application.
type bindingOf struct {
	claim  *obv1.ObjectBucketClaim
	secret *corev1.Secret
	cm     *corev1.ConfigMap
	ob     *obv1.ObjectBucket
	bucket string
}

func readBinding(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim) bindingOf {
	t.Helper()
	b := bindingOf{claim: getClaim(ctx, t, k8s, obc), secret: &corev1.Secret{}, cm: &corev1.ConfigMap{}, ob: &obv1.ObjectBucket{}}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), b.secret); err != nil {
		t.Fatalf("get secret: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), b.cm); err != nil {
		t.Fatalf("get config map: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: NameForClaim(b.claim.UID)}, b.ob); err != nil {
		t.Fatalf("get object bucket: %v", err)
	}
	b.bucket = b.cm.Data[KeyBucketName]
	return b
}

// checkCredentials proves the Secret's keys work in their bucket and
// nowhere else (other is another bucket on the server).
func checkCredentials(ctx context.Context, t *testing.T, b bindingOf, other string) {
	t.Helper()
	c := s3As(string(b.secret.Data[KeyAccessKeyID]), string(b.secret.Data[KeySecretAccessKey]))
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b.bucket), Key: aws.String("probe"), Body: strings.NewReader("hello")}); err != nil {
		t.Errorf("put an object into %s with the claim's keys: %v", b.bucket, err)
	}
	if other != "" {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(other), Key: aws.String("probe"), Body: strings.NewReader("x")}); err == nil {
			t.Errorf("the claim's keys could write to another bucket, %s", other)
		}
	}
}

// keysOf returns the access key ids of the claim's backend user.
func keysOf(ctx context.Context, t *testing.T, uid string) []string {
	t.Helper()
	obs, err := backend.drv.Observe(ctx, driver.ObserveRequest{UserName: driver.UserName(testPrefix, claimKind, uid)})
	if err != nil {
		t.Fatalf("observe user: %v", err)
	}
	return obs.KeyIDs
}

// objectBucketsOf lists ObjectBuckets bound to the claim's UID.
func objectBucketsOf(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim) []string {
	t.Helper()
	var list obv1.ObjectBucketList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatalf("list object buckets: %v", err)
	}
	var names []string
	for _, ob := range list.Items {
		if ob.Labels[LabelClaimUID] == string(obc.UID) {
			names = append(names, ob.Name)
		}
	}
	return names
}

// keepsConditions reports whether the suite's claim CRD keeps
// status.conditions and observedGeneration (NooBaa's keeps phase alone).
func keepsConditions() bool { return !harness.PrunesStatus(crdVariant) }

// wantProvisioned checks that the claim's Provisioned condition has reason
// and a message that holds each of parts. On a CRD set that prunes
// conditions it checks that the claim has none (the controller stopped
// writing them); the tests that check reasons also wait for the Event.
func wantProvisioned(t *testing.T, got *obv1.ObjectBucketClaim, reason string, parts ...string) {
	t.Helper()
	c := meta.FindStatusCondition(got.Status.Conditions, ConditionProvisioned)
	if !keepsConditions() {
		if len(got.Status.Conditions) != 0 || got.Status.ObservedGeneration != 0 {
			t.Errorf("status = %+v under %s's CRDs, which prune conditions and observedGeneration", got.Status, crdVariant)
		}
		return
	}
	ok := c != nil && c.Reason == reason
	for _, p := range parts {
		ok = ok && strings.Contains(c.Message, p)
	}
	if !ok {
		t.Errorf("Provisioned condition = %+v, want reason %s and a message naming %q", c, reason, parts)
	}
}

func deleteObj(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete %T %s: %v", obj, obj.GetName(), err)
	}
}

var errCrash = errors.New("crash point (test)")
