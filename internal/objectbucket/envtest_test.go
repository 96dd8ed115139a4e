package objectbucket

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// The suite shares one API server: starting kube-apiserver and etcd costs
// seconds, and every test works in its own namespace or on uniquely named
// cluster-scoped objects. Tests that change a CRD restore it before they end.
//
// The API server has the CRD set BUCKETBROKER_TEST_CRDS names
// (harness.CRDVariant): bucketbroker's own by default, or one shaped as
// NooBaa or Rook install it. The claim tests run unchanged on each; the
// few facts that differ (what a schema prunes) are asked of crdVariant.
var (
	k8s         client.Client
	startupTook time.Duration
	repoRoot    = mustAbs(filepath.Join("..", "..")) // the embedded S3 server changes the working directory
	pruningCRD  = filepath.Join(repoRoot, "config", "crd", "test", "pruning", "objectbucket.io_objectbucketclaims.yaml")
	// crdVariant and crdDir are the suite's CRD set and its directory;
	// claimCRDPath is its ObjectBucketClaim CRD, which tests that swap the
	// claim CRD restore.
	crdVariant   string
	crdDir       string
	claimCRDPath string
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))
	var err error
	crdVariant, crdDir, err = harness.CRDVariant(repoRoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	claimCRDPath = filepath.Join(crdDir, "objectbucket.io_objectbucketclaims.yaml")
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return m.Run() // each test skips, or fails on CI: see apiServer
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, obv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintf(os.Stderr, "build scheme: %v\n", err)
			return 1
		}
	}
	useExisting := false
	env := &envtest.Environment{
		Scheme:                scheme,
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
		// USE_EXISTING_CLUSTER must not point this suite at a developer's
		// cluster: it swaps CRDs.
		UseExistingCluster: &useExisting,
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "objectbucket.io CRDs: %s (%s)\n", crdVariant, crdDir)
	cfg, err := env.Start()
	startupTook = time.Since(start)
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest from KUBEBUILDER_ASSETS=%s: %v\n", assets, err)
		return 1
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "create client: %v\n", err)
		return 1
	}
	restConfig, testScheme = cfg, scheme
	// One embedded S3 + IAM server for the whole process (versitygw allows
	// one): controller tests check real credentials against it.
	stop, err := startBackend()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start embedded S3 server: %v\n", err)
		return 1
	}
	defer stop()
	return m.Run()
}

// apiServer returns the client of the suite's API server. Without one the
// test is skipped, except on CI, where a skipped API server test would pass
// without having tested anything.
func apiServer(t *testing.T) client.Client {
	t.Helper()
	if k8s != nil {
		return k8s
	}
	const msg = "KUBEBUILDER_ASSETS is unset; run: export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI must run the API server tests, never skip them)")
	}
	t.Skip(msg)
	return nil
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates a namespace of its own for one test. envtest runs no
// namespace controller, so it is never really deleted; names never repeat.
func namespace(ctx context.Context, t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "obc-test-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

func TestEnvtestStarts(t *testing.T) {
	apiServer(t)
	// Not a timed test: the duration is reported, never asserted.
	t.Logf("envtest (etcd + kube-apiserver + CRDs) started in %s", startupTook.Round(time.Millisecond))
}

// ownCRDs skips a test of the schema of bucketbroker's own CRDs on another
// CRD set.
func ownCRDs(t *testing.T) {
	t.Helper()
	if crdVariant != harness.CRDsBucketbroker {
		t.Skipf("tests the schema of bucketbroker's own CRDs; the suite runs on %s's", crdVariant)
	}
}

func TestObjectBucketClaimRoundTrip(t *testing.T) {
	c := apiServer(t)
	ownCRDs(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, c)

	want := obv1.ObjectBucketClaimSpec{
		StorageClassName:   "bucketbroker",
		BucketName:         "photos-2f1c",
		GenerateBucketName: "photos",
		AdditionalConfig:   map[string]string{"maxObjects": "1000", "maxSize": "2G"},
		ObjectBucketName:   "obc-0f6c2e4a",
	}
	obc := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "photos"},
		Spec:       want,
	}
	if err := c.Create(ctx, obc); err != nil {
		t.Fatalf("create claim: %v", err)
	}

	var got obv1.ObjectBucketClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(obc), &got); err != nil {
		t.Fatalf("get claim: %v", err)
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec read back (-want +got):\n%s", diff)
	}

	// Status goes through the status subresource, with the conditions and
	// observedGeneration that bucketbroker adds to the original API.
	wantStatus := obv1.ObjectBucketClaimStatus{Phase: obv1.PhaseBound, ObservedGeneration: got.Generation}
	meta.SetStatusCondition(&wantStatus.Conditions, metav1.Condition{
		Type: obv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Bound",
		Message: "bucket photos-2f1c is ready", ObservedGeneration: got.Generation,
		LastTransitionTime: metav1.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	got.Status = wantStatus
	if err := c.Status().Update(ctx, &got); err != nil {
		t.Fatalf("update claim status: %v", err)
	}
	var again obv1.ObjectBucketClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(obc), &again); err != nil {
		t.Fatalf("get claim: %v", err)
	}
	if diff := cmp.Diff(wantStatus, again.Status); diff != "" {
		t.Errorf("status read back (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, again.Spec); diff != "" {
		t.Errorf("spec changed by a status update (-want +got):\n%s", diff)
	}
}

func TestObjectBucketRoundTrip(t *testing.T) {
	c := apiServer(t)
	ownCRDs(t)
	ctx := testContext(t)

	want := obv1.ObjectBucketSpec{
		StorageClassName: "bucketbroker",
		ReclaimPolicy:    obv1.ReclaimRetain,
		ClaimRef: &obv1.ClaimReference{
			APIVersion: "objectbucket.io/v1alpha1", Kind: "ObjectBucketClaim",
			Namespace: "apps", Name: "photos", UID: "6f1d4a52-1f0e-4d8e-9a57-3b2c1d0e9f8a",
		},
		Endpoint: &obv1.Endpoint{
			BucketHost: "s3.example.test", BucketPort: 443, BucketName: "photos-2f1c",
			Region: "us-east-1", SubRegion: "a",
			AdditionalConfig: map[string]string{"tls": "true"},
		},
		AdditionalState: map[string]string{"user": "bb-6f1d4a52"},
	}
	ob := &obv1.ObjectBucket{ObjectMeta: metav1.ObjectMeta{GenerateName: "obc-"}, Spec: want}
	if err := c.Create(ctx, ob); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ob) })
	if ob.Namespace != "" {
		t.Errorf("ObjectBucket got namespace %q, want cluster-scoped", ob.Namespace)
	}

	var got obv1.ObjectBucket
	if err := c.Get(ctx, client.ObjectKeyFromObject(ob), &got); err != nil {
		t.Fatalf("get bucket: %v", err)
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec read back (-want +got):\n%s", diff)
	}

	got.Status = obv1.ObjectBucketStatus{Phase: obv1.PhaseReleased, ObservedGeneration: got.Generation}
	if err := c.Status().Update(ctx, &got); err != nil {
		t.Fatalf("update bucket status: %v", err)
	}
	var again obv1.ObjectBucket
	if err := c.Get(ctx, client.ObjectKeyFromObject(ob), &again); err != nil {
		t.Fatalf("get bucket: %v", err)
	}
	if again.Status.Phase != obv1.PhaseReleased {
		t.Errorf("status.phase = %q, want %q", again.Status.Phase, obv1.PhaseReleased)
	}
}

// TestManifestsAccepted sends objects as other tools wrote them, as
// unstructured JSON, so nothing is normalized by our Go types on the way.
func TestManifestsAccepted(t *testing.T) {
	c := apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, c)

	cases := map[string]struct {
		reason  string
		obj     *unstructured.Unstructured
		invalid bool
	}{
		"SampleStorageClass": {
			reason: "config/samples/storageclass.yaml must be a valid StorageClass",
			obj:    fromFile(t, filepath.Join(repoRoot, "config", "samples", "storageclass.yaml")),
		},
		"SampleClaim": {
			reason: "config/samples/objectbucketclaim.yaml is written as Rook documents it, " +
				"with an additionalConfig that holds only comments (null)",
			obj: fromFile(t, filepath.Join(repoRoot, "config", "samples", "objectbucketclaim.yaml")),
		},
		"ClaimWrittenByLibBucketProvisioner": {
			reason: `lib-bucket-provisioner always wrote bucketName (its tag was "omityempty") ` +
				"and filled in objectBucketName when bound",
			obj: fromYAML(t, `
apiVersion: objectbucket.io/v1alpha1
kind: ObjectBucketClaim
metadata: {name: legacy, namespace: `+ns+`}
spec:
  storageClassName: rook-ceph-bucket
  bucketName: ""
  generateBucketName: legacy
  additionalConfig: null
  objectBucketName: obc-`+ns+`-legacy
`),
		},
		"ClaimWithoutStorageClass": {
			reason:  "storageClassName is required: without it no provisioner is responsible",
			obj:     fromYAML(t, "apiVersion: objectbucket.io/v1alpha1\nkind: ObjectBucketClaim\nmetadata: {name: nosc, namespace: "+ns+"}\nspec: {generateBucketName: x}\n"),
			invalid: true,
		},
		"BucketWrittenByLibBucketProvisioner": {
			reason: "lib-bucket-provisioner wrote every Endpoint and Connection field, " +
				"nil maps as null, and claimRef as a core/v1 ObjectReference",
			obj: fromYAML(t, `
apiVersion: objectbucket.io/v1alpha1
kind: ObjectBucket
metadata: {name: obc-`+ns+`-legacy}
spec:
  storageClassName: rook-ceph-bucket
  reclaimPolicy: Delete
  claimRef:
    apiVersion: objectbucket.io/v1alpha1
    kind: ObjectBucketClaim
    namespace: `+ns+`
    name: legacy
    uid: 0c9bd7a1-52c4-4f3e-8a52-2f8f1a1e5d3c
    resourceVersion: "4711"
  endpoint:
    bucketHost: rook-ceph-rgw-my-store.rook-ceph.svc
    bucketPort: 80
    bucketName: legacy-8a3e0e5c-0d4b-4f5e-9d2b-1f0e6f3a7b9c
    region: us-east-1
    subRegion: ""
    additionalConfig: null
  additionalState: null
`),
		},
		"BucketWithRecyclePolicy": {
			reason:  "reclaimPolicy is Delete or Retain; Recycle has no meaning for a bucket",
			obj:     fromYAML(t, "apiVersion: objectbucket.io/v1alpha1\nkind: ObjectBucket\nmetadata: {name: recycle-"+ns+"}\nspec: {storageClassName: x, reclaimPolicy: Recycle}\n"),
			invalid: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.invalid {
				ownCRDs(t) // Rook's and NooBaa's schemas validate less
			}
			obj := tc.obj.DeepCopy()
			err := c.Create(ctx, obj)
			switch {
			case tc.invalid && !apierrors.IsInvalid(err):
				t.Fatalf("%s\ncreate: got error %v, want Invalid", tc.reason, err)
			case !tc.invalid && err != nil:
				t.Fatalf("%s\ncreate: %v", tc.reason, err)
			case !tc.invalid:
				t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
			}
		})
	}
}

// TestPrunedObjectBucketName reproduces rook#6650: an ObjectBucketClaim CRD
// without objectBucketName in its schema (as Rook and NooBaa shipped) makes
// the API server drop the field, both from claims written afterwards and
// from claims already bound, which then look unbound. The variant CRD is
// derived by hack/generate.sh; this test shows it really prunes, so that
// controller tests can rely on it.
func TestPrunedObjectBucketName(t *testing.T) {
	c := apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, c)

	bound := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bound"},
		Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: "bucketbroker", ObjectBucketName: "ob-bound"},
	}
	if err := c.Create(ctx, bound); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	// Control: with the generated CRD the field is kept.
	if got := getClaim(ctx, t, c, bound).Spec.ObjectBucketName; got != "ob-bound" {
		t.Fatalf("with the generated CRD: objectBucketName = %q, want %q", got, "ob-bound")
	}

	base, variant := readCRD(t, claimCRDPath), readCRD(t, pruningCRD)
	if _, ok := variant.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["objectBucketName"]; ok {
		t.Fatalf("%s still has spec.objectBucketName in its schema", pruningCRD)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := swapClaimSchema(ctx, c, base, ns, true); err != nil {
			t.Errorf("restore the generated ObjectBucketClaim CRD: %v", err)
		}
	})
	if err := swapClaimSchema(ctx, c, variant, ns, false); err != nil {
		t.Fatalf("install the pruning CRD: %v", err)
	}

	// A claim bound before the CRD changed loses the field on read.
	if got := getClaim(ctx, t, c, bound).Spec.ObjectBucketName; got != "" {
		t.Errorf("bound claim under the pruning CRD: objectBucketName = %q, want it pruned", got)
	}
	// A claim written afterwards loses it on write.
	fresh := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fresh"},
		Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: "bucketbroker", ObjectBucketName: "ob-fresh"},
	}
	if err := c.Create(ctx, fresh); err != nil {
		t.Fatalf("create claim under the pruning CRD: %v", err)
	}
	if got := fresh.Spec.ObjectBucketName; got != "" {
		t.Errorf("create response under the pruning CRD: objectBucketName = %q, want it pruned", got)
	}
	if got := getClaim(ctx, t, c, fresh).Spec.ObjectBucketName; got != "" {
		t.Errorf("claim created under the pruning CRD: objectBucketName = %q, want it pruned", got)
	}
}

func getClaim(ctx context.Context, t *testing.T, c client.Client, obc *obv1.ObjectBucketClaim) *obv1.ObjectBucketClaim {
	t.Helper()
	var got obv1.ObjectBucketClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(obc), &got); err != nil {
		t.Fatalf("get claim %s: %v", obc.Name, err)
	}
	return &got
}

// swapClaimSchema replaces the spec of the installed ObjectBucketClaim CRD
// with crd's and waits until the API server serves it. The switch is
// asynchronous (the server rebuilds the resource's storage), so it probes
// with dry-run creates in namespace ns until objectBucketName is kept
// (keeps=true) or pruned (keeps=false).
func swapClaimSchema(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, ns string, keeps bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), &cur); err != nil {
			return err
		}
		cur.Spec = crd.Spec
		return c.Update(ctx, &cur)
	})
	if err != nil {
		return fmt.Errorf("update CRD %s: %w", crd.Name, err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := &obv1.ObjectBucketClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "schema-probe"},
			Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: "bucketbroker", ObjectBucketName: "probe"},
		}
		if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		last = probe.Spec.ObjectBucketName
		return (last != "") == keeps, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the new schema (objectBucketName kept: %t; last probe read %q): %w", keeps, last, err)
	}
	return nil
}

func readCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if crd.Name == "" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("%s: want a CRD with one version and a schema", path)
	}
	return &crd
}

func fromFile(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fromYAML(t, string(data))
}

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("convert YAML: %v", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatalf("decode object: %v", err)
	}
	if u.GetKind() == "" {
		t.Fatal("object without kind")
	}
	return u
}
