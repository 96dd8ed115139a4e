package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// testImage is the tag the image tests build (hack/image.sh) and run, and
// runID names their containers: both are this run's own, so that test runs
// of several worktrees at once neither run each other's image nor remove
// each other's containers.
var (
	runID     = strings.ToLower(rand.Text()[:10])
	testImage = "localhost/bucketbroker:test-" + runID
)

// containerUser is the image's user; the data volume is made its own, as a
// pod's fsGroup makes it.
const containerUser = 65532

var (
	imageOnce  sync.Once
	imageErr   error
	imageBuilt []string // the podman command that built testImage, to remove it
)

// removeImage removes the image the tests built, if any (TestMain).
func removeImage() {
	if imageBuilt != nil {
		_ = exec.Command(imageBuilt[0], append(append([]string{}, imageBuilt[1:]...), "rmi", "-f", testImage)...).Run()
	}
}

// podman returns the podman command line (hack/podman.sh) after building
// the image once, or skips the test with the reason podman cannot run here.
func podman(t *testing.T) []string {
	t.Helper()
	needCluster(t)
	if reason := os.Getenv("BUCKETBROKER_TEST_PODMAN_SKIP"); reason != "" {
		t.Skip(reason)
	}
	cmdline := os.Getenv("BUCKETBROKER_TEST_PODMAN")
	if cmdline == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but neither BUCKETBROKER_TEST_PODMAN nor BUCKETBROKER_TEST_PODMAN_SKIP is set (hack/with-test-servers.sh sets one)")
		}
		t.Skip("BUCKETBROKER_TEST_PODMAN is unset (run under hack/with-test-servers.sh)")
	}
	imageOnce.Do(func() {
		out, err := exec.Command(filepath.Join(root, "hack", "image.sh"), testImage).CombinedOutput()
		if err != nil {
			imageErr = fmt.Errorf("hack/image.sh: %w\n%s", err, out)
			return
		}
		imageBuilt = strings.Fields(cmdline)
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return strings.Fields(cmdline)
}

// container is one running container of the test image.
type container struct {
	t      *testing.T
	podman []string
	name   string
}

// runContainer starts the image as a pod runs it under the chart's
// securityContext: read-only root filesystem with no tmpfs either (so
// nothing may be written outside the data volume), a non-root user, no
// capabilities, no privilege escalation; only dataDir (mounted at /data)
// and the given read-only mounts are there. args are the Deployment's.
func runContainer(t *testing.T, pm []string, name, dataDir string, env map[string]string, ro map[string]string, args []string) *container {
	t.Helper()
	name += "-" + runID
	if err := os.Chown(dataDir, containerUser, containerUser); err != nil {
		t.Fatalf("give the data volume to the container's user: %v", err)
	}
	run := append(append([]string{}, pm[1:]...), "run", "-d", "--name", name,
		"--read-only", "--read-only-tmpfs=false",
		"--user", fmt.Sprintf("%d:%d", containerUser, containerUser),
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--network", "host",
		"-v", dataDir+":/data")
	for host, in := range ro {
		run = append(run, "-v", host+":"+in+":ro")
	}
	for k, v := range env {
		run = append(run, "-e", k+"="+v)
	}
	run = append(run, testImage)
	run = append(run, args...)
	c := &container{t: t, podman: pm, name: name}
	_, _ = c.podmanRun("rm", "-f", name) // left by an interrupted run
	if out, err := c.podmanRun(run...); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.podmanRun("logs", name)
			t.Logf("container %s log (tail):\n%s", name, harness.Tail(logs, 6000))
		}
		if out, err := c.podmanRun("rm", "-f", "-t", "10", name); err != nil {
			t.Errorf("podman rm %s: %v\n%s", name, err, out)
		}
	})
	return c
}

func (c *container) podmanRun(args ...string) (string, error) {
	cmd := exec.Command(c.podman[0], append(append([]string{}, c.podman[1:]...), args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// running reports whether the container still runs.
func (c *container) running() bool {
	out, err := c.podmanRun("inspect", "-f", "{{.State.Running}}", c.name)
	return err == nil && strings.TrimSpace(out) == "true"
}

// until polls check until it succeeds; the test fails if the container
// exits first or the deadline (generous: it bounds a hang, it measures
// nothing) passes.
func (c *container) until(what string, check func() error) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if !c.running() {
			c.t.Fatalf("%s: the container exited (last check: %v)", what, err)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not after 2 minutes: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// containerSpec returns the rendered Deployment's container: its args, and
// its environment with each Secret reference resolved from secrets
// ("secret/key") and the optional ones that are not there left out.
func containerSpec(t *testing.T, c corev1.Container, secrets map[string]string) ([]string, map[string]string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name+"/"+ref.Key]
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				t.Fatalf("env %s needs Secret %s key %s, which the test does not provide", e.Name, ref.Name, ref.Key)
			}
			if ok {
				env[e.Name] = v
			}
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = "pod-0"
		default:
			t.Fatalf("env %s: a source the test does not know", e.Name)
		}
	}
	return c.Args, env
}

// TestImageServe runs the image with the broker Deployment's own args and
// environment: /readyz answers, and a provision and a bind through the OSB
// API give credentials that work against the embedded S3 server.
func TestImageServe(t *testing.T) {
	pm := podman(t)
	api, s3Addr, iamAddr := harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)
	objs := render(t, "bb", "bucketbroker", "controller.enabled=false", "broker.enabled=true",
		"broker.port="+port(api), "broker.s3Port="+port(s3Addr), "broker.iamPort="+port(iamAddr),
		"broker.publicS3Endpoint=http://"+s3Addr)
	d := deployment(t, objs, "bb-broker")
	args, env := containerSpec(t, d.Spec.Template.Spec.Containers[0], map[string]string{
		"bucketbroker-broker-auth/username": harness.User,
		"bucketbroker-broker-auth/password": harness.Pass,
	})
	c := runContainer(t, pm, "bucketbroker-test-serve", t.TempDir(), env, nil, args)

	c.until("GET /readyz", func() error {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	b := &harness.Broker{API: api, Backend: harness.Backend{S3: "http://" + s3Addr}}
	inst := "/v2/service_instances/image-test"
	if _, err := b.Until(time.Minute, "PUT", inst, harness.ProvisionBody, http.StatusCreated); err != nil {
		t.Fatalf("provision: %v", err)
	}
	r, err := b.Until(time.Minute, "PUT", inst+"/service_bindings/app", harness.BindBody, http.StatusCreated)
	if err != nil {
		t.Fatalf("bind: %v", err)
	}
	if err := b.Backend.Works(r.Creds()); err != nil {
		t.Errorf("the binding's credentials do not work against the container's S3 server: %v", err)
	}
}

// TestImageController runs the image with the controller Deployment's own
// args, as the chart's ServiceAccount (the chart's RBAC applied to envtest,
// its kubeconfig mounted read-only), and binds a claim: the claim's Secret
// holds keys that work on the claim's bucket.
func TestImageController(t *testing.T) {
	pm := podman(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s3Addr, iamAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	metrics, probes := harness.FreeAddr(t), harness.FreeAddr(t)
	ns, release := "bb-image", "bb-image"
	objs := render(t, release, ns, "createNamespace=true", "controller.storageClass.name="+release,
		"controller.provisionerName=bucketbroker.io/image-test",
		"controller.s3Port="+port(s3Addr), "controller.iamPort="+port(iamAddr),
		"controller.metricsPort="+port(metrics), "controller.probePort="+port(probes),
		"controller.publicS3Endpoint=http://"+s3Addr)
	apply(ctx, t, objs)
	d := deployment(t, objs, release+"-controller")

	// The chart's ServiceAccount, as the API server knows it: a client
	// certificate with its user name matches the chart's RBAC subjects.
	u, err := env.AddUser(envtest.User{Name: "system:serviceaccount:" + ns + ":" + d.Spec.Template.Spec.ServiceAccountName,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(kdir, "config"), kc, 0o644); err != nil {
		t.Fatal(err)
	}
	args, cenv := containerSpec(t, d.Spec.Template.Spec.Containers[0], nil)
	// Outside a pod: the kubeconfig instead of the in-cluster config, and
	// the namespace a pod would take from its service account.
	args = append(args, "--kubeconfig=/kube/config", "--leader-election-namespace="+ns)
	c := runContainer(t, pm, "bucketbroker-test-controller", t.TempDir(), cenv, map[string]string{kdir: "/kube"}, args)

	c.until("GET /readyz", func() error {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	claim := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "photos"},
		Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: release, GenerateBucketName: "photos"},
	}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	c.until("claim Bound", func() error {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.Phase != obv1.PhaseBound {
			return fmt.Errorf("phase %q", claim.Status.Phase)
		}
		return nil
	})
	var secret corev1.Secret
	var cm corev1.ConfigMap
	if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), &secret); err != nil {
		t.Fatalf("claim's Secret: %v", err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), &cm); err != nil {
		t.Fatalf("claim's ConfigMap: %v", err)
	}
	bucket := cm.Data["BUCKET_NAME"]
	s3c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String("http://" + s3Addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(string(secret.Data["AWS_ACCESS_KEY_ID"]), string(secret.Data["AWS_SECRET_ACCESS_KEY"]), "")})
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("hello"), Body: strings.NewReader("x")}); err != nil {
		t.Errorf("put into the claim's bucket %q with the claim's keys: %v", bucket, err)
	}
}
