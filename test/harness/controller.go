package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
)

// ControllerPrefix is the controller's --name-prefix in these tests (its
// default): every backend bucket and user it makes starts with "bb-".
const ControllerPrefix = "bb"

// Controller is one `bucketbroker controller` process, on the embedded S3 +
// IAM server (NewController) or on the s3iam driver against an external
// one (NewExternalController). Its data dir, ports and provisioner name
// survive restarts.
type Controller struct {
	t       testing.TB
	binary  string
	DataDir string
	// Name names the process in the test's log: the provisioner, unless
	// several replicas serve it.
	Name string
	// Kubeconfig is the file the process reads; Provisioner the
	// StorageClass provisioner whose claims it serves.
	Kubeconfig, Provisioner string
	// Backend is the S3 + IAM server, with the root keys the process is
	// given; its listings count only names that start with ControllerPrefix.
	Backend Backend
	// LeaseNamespace, when set, runs the process with leader election, its
	// Lease in that namespace (the controller's user needs the Role of
	// APIServer.LeaderElectionRole there); empty runs it alone, with
	// --leader-elect=false.
	LeaseNamespace string

	external                   bool
	s3Addr, iamAddr, probeAddr string
	metricsAddr                string // empty: metrics off
	cmd                        *exec.Cmd
	exited                     chan error
	log                        *LockedBuffer
}

// NewController returns a controller in a fresh data dir, not started. It
// is stopped when the test ends, and its log is shown if the test failed.
func NewController(t testing.TB, binary, kubeconfig, provisioner string) *Controller {
	c := &Controller{t: t, binary: binary, DataDir: t.TempDir(), Name: provisioner, Kubeconfig: kubeconfig, Provisioner: provisioner,
		s3Addr: FreeAddr(t), iamAddr: FreeAddr(t), probeAddr: FreeAddr(t), log: &LockedBuffer{}}
	c.Backend = Backend{S3: "http://" + c.s3Addr, IAM: "http://" + c.iamAddr, AccessKey: RootAK, SecretKey: RootSK, Prefix: ControllerPrefix}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("controller %s log (tail):\n%s", c.Name, Tail(c.Log(), 6000))
		}
	})
	return c
}

// NewExternalController returns a controller on the s3iam driver against
// be (its S3 and IAM URLs and root keys; path-style addressing), not
// started, with its Prometheus metrics on a loopback address of its own
// (see Metric). It keeps nothing on disk, so several replicas can serve
// one backend, as a Deployment does with leader election. Listings of
// Backend count only names that start with ControllerPrefix.
func NewExternalController(t testing.TB, binary, kubeconfig, provisioner string, be Backend) *Controller {
	c := NewController(t, binary, kubeconfig, provisioner)
	c.external = true
	be.Prefix = ControllerPrefix
	c.Backend = be
	c.s3Addr = strings.TrimPrefix(strings.TrimPrefix(be.S3, "http://"), "https://")
	c.iamAddr = ""
	c.metricsAddr = FreeAddr(t)
	return c
}

// ProbeAddr is the address of the process's /healthz and /readyz.
func (c *Controller) ProbeAddr() string { return c.probeAddr }

// S3Addr is the S3 server's host:port (the claims' BUCKET_HOST and
// BUCKET_PORT).
func (c *Controller) S3Addr() string { return c.s3Addr }

// Log returns everything the process (all its runs) wrote.
func (c *Controller) Log() string { return c.log.String() }

// TryStart runs the controller, with crash points armed if any are given,
// and waits until it answers /readyz: the embedded server is up by then,
// and the manager is starting its controller (with leader election: it is
// campaigning for the Lease, which it may not hold yet).
func (c *Controller) TryStart(crashAt ...string) error {
	fmt.Fprintf(c.log, "=== start %s (crash at %q)\n", time.Now().Format(time.StampMilli), crashAt)
	metrics := c.metricsAddr
	if metrics == "" {
		metrics = "0"
	}
	c.cmd = exec.Command(c.binary, "controller", "--kubeconfig", c.Kubeconfig,
		"--provisioner-name", c.Provisioner, "--name-prefix", ControllerPrefix,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", c.probeAddr, "--log-format", "text")
	if c.LeaseNamespace == "" {
		c.cmd.Args = append(c.cmd.Args, "--leader-elect=false")
	} else {
		c.cmd.Args = append(c.cmd.Args, "--leader-elect=true", "--leader-election-namespace", c.LeaseNamespace)
	}
	if c.external {
		c.cmd.Args = append(c.cmd.Args, "--driver", "s3iam", "--s3-endpoint", c.Backend.S3,
			"--iam-endpoint", c.Backend.IAM, "--path-style")
	} else {
		c.cmd.Args = append(c.cmd.Args, "--data-dir", c.DataDir, "--s3-listen", c.s3Addr, "--iam-listen", c.iamAddr)
	}
	c.cmd.Env = append(os.Environ(), "BUCKETBROKER_S3_ROOT_ACCESS_KEY="+c.Backend.AccessKey,
		"BUCKETBROKER_S3_ROOT_SECRET_KEY="+c.Backend.SecretKey, crashpoint.EnvVar+"="+strings.Join(crashAt, ","))
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		return err
	}
	c.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, ch chan error) { ch <- cmd.Wait() }(c.cmd, c.exited)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + c.probeAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-c.exited:
			c.cmd = nil
			return fmt.Errorf("controller exited at start: %w\n%s", exitErr(err), Tail(c.Log(), 3000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("controller not ready within 30s")
}

// TryWaitCrash waits up to d for the process to exit at a crash point and
// reports whether it did; any other end is an error that carries the
// process's last output.
func (c *Controller) TryWaitCrash(d time.Duration) error {
	if c.cmd == nil {
		return fmt.Errorf("controller is not running")
	}
	select {
	case err := <-c.exited:
		c.cmd = nil
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != crashpoint.ExitCode {
			return fmt.Errorf("controller exited with %w, want exit code %d at a crash point:\n%s",
				exitErr(err), crashpoint.ExitCode, Tail(c.Log(), 3000))
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("controller did not reach its crash point within %s", d)
	}
}

// Stop stops the controller gracefully (SIGTERM), as a rolling update would.
func (c *Controller) Stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	// The exit status of a stopped process is not judged here (tests check
	// what it left behind); its log shows it.
	select {
	case err := <-c.exited:
		noteExit(c.log, err)
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		noteExit(c.log, <-c.exited)
	}
	c.cmd = nil
}

// Metric sums the samples of the Prometheus metric name whose labels
// include every one of labels (`controller="objectbucketclaim"`), read
// from the running process's /metrics. A metric with no sample counts as
// 0: controller-runtime makes a controller's series when the controller
// starts, and the leader election gauge when the process first leads.
func (c *Controller) Metric(name string, labels ...string) (float64, error) {
	if c.metricsAddr == "" || c.cmd == nil {
		return 0, fmt.Errorf("metric %s: the controller is not running with metrics", name)
	}
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.metricsAddr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("metric %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("metric %s: GET /metrics: read the body: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metric %s: GET /metrics: %d", name, resp.StatusCode)
	}
	var sum float64
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		i := strings.LastIndexByte(line, ' ') // label values may hold spaces
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series, value := line[:i], line[i+1:]
		metric, lbls, _ := strings.Cut(series, "{")
		if metric != name || !containsAll(lbls, labels) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: sample %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// ReadWrite writes an object into bucket with the given keys and reads it
// back. The object stays, as an application's data would: deleting the
// claim under a Delete reclaim policy has to empty the bucket.
func (be Backend) ReadWrite(ak, sk, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := be.s3(ak, sk)
	const body = "written by the crash test"
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe"),
		Body: strings.NewReader(body)}); err != nil {
		return fmt.Errorf("put into %s: %w", bucket, err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe")})
	if err != nil {
		return fmt.Errorf("get from %s: %w", bucket, err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(out.Body)
	if err != nil {
		return fmt.Errorf("read from %s: %w", bucket, err)
	}
	if string(got) != body {
		return fmt.Errorf("read %q from %s, wrote %q", got, bucket, body)
	}
	return nil
}

// IntrusionKey is the object Denied writes when the keys are not refused:
// a check of a bucket's contents that runs beside Denied leaves it out
// (Denied's caller reports the leak).
const IntrusionKey = "intrusion"

// Denied reports whether the keys are refused (403: access denied, or
// keys the backend does not know) when they write into bucket; err is set
// when the answer was neither that nor a success.
func (be Backend) Denied(ak, sk, bucket string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(ak, sk).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(IntrusionKey),
		Body: strings.NewReader("x")})
	var re interface{ HTTPStatusCode() int }
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden:
		return true, nil
	default:
		return false, err
	}
}

// Authenticates reports whether the backend still accepts the keys at all
// (a ListBuckets that is not refused).
func (be Backend) Authenticates(ak, sk string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(ak, sk).ListBuckets(ctx, &s3.ListBucketsInput{})
	return err == nil
}

// CreateBucket creates a bucket with the root keys: one that is not the
// controller's.
func (be Backend) CreateBucket(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(be.AccessKey, be.SecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// BucketExists asks with the root keys whether the bucket is there.
func (be Backend) BucketExists(name string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(be.AccessKey, be.SecretKey).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)})
	var nf *s3types.NotFound
	var nb *s3types.NoSuchBucket
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &nf), errors.As(err, &nb):
		return false, nil
	default:
		return false, fmt.Errorf("head bucket %s: %w", name, err)
	}
}

// DeleteBucket deletes an empty bucket with the root keys.
func (be Backend) DeleteBucket(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(be.AccessKey, be.SecretKey).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
	return err
}
