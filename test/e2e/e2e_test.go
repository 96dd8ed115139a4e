package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
)

const (
	serviceID = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	planStd   = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	user      = "e2e"
	pass      = "e2e-password"
	rootAK    = "E2EROOTACCESSKEY0001"
	rootSK    = "e2erootsecretkeythatislongenoughtobeok1"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bucketbroker-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "bucketbroker")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/bucketbroker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build bucketbroker:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// broker is one bucketbroker process; its ports and data dir survive
// restarts, as they would for a platform.
type broker struct {
	t                   *testing.T
	dataDir             string
	api, s3Addr, iamAdr string
	cmd                 *exec.Cmd
	exited              chan error
	log                 *bytes.Buffer
	// args and env are added to every start (another driver or store).
	args, env []string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newBroker(t *testing.T) *broker {
	b := &broker{t: t, dataDir: t.TempDir(), api: freeAddr(t), s3Addr: freeAddr(t), iamAdr: freeAddr(t)}
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("broker log:\n%s", b.log)
		}
	})
	return b
}

// start runs the broker, with crash points armed if any are given, and
// waits until it serves.
func (b *broker) start(crashAt ...string) {
	b.t.Helper()
	b.log = &bytes.Buffer{}
	b.cmd = exec.Command(binary, "serve", "--listen", b.api, "--s3-listen", b.s3Addr, "--iam-listen", b.iamAdr,
		"--data-dir", b.dataDir, "--log-format", "text")
	b.cmd.Args = append(b.cmd.Args, b.args...)
	b.cmd.Env = append(os.Environ(), "BUCKETBROKER_USERNAME="+user, "BUCKETBROKER_PASSWORD="+pass,
		"BUCKETBROKER_S3_ROOT_ACCESS_KEY="+rootAK, "BUCKETBROKER_S3_ROOT_SECRET_KEY="+rootSK,
		crashpoint.EnvVar+"="+strings.Join(crashAt, ","))
	b.cmd.Env = append(b.cmd.Env, b.env...)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.exited = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(b.cmd, b.exited)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + b.api + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-b.exited:
			b.t.Fatalf("broker exited at start: %v\n%s", err, b.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	b.t.Fatalf("broker did not serve within 30s:\n%s", b.log)
}

// waitCrash waits for the process to exit at a crash point.
func (b *broker) waitCrash() {
	b.t.Helper()
	select {
	case err := <-b.exited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != crashpoint.ExitCode {
			b.t.Fatalf("broker exited with %v, want exit code %d at a crash point\n%s", err, crashpoint.ExitCode, b.log)
		}
		b.cmd = nil
	case <-time.After(30 * time.Second):
		b.t.Fatalf("broker did not reach its crash point\n%s", b.log)
	}
}

func (b *broker) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}

type reply struct {
	code int
	body map[string]any
	err  error
}

func (r reply) creds() map[string]any { m, _ := r.body["credentials"].(map[string]any); return m }

func (b *broker) do(method, path string, body any) reply {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, "http://"+b.api+path, rd)
	req.SetBasicAuth(user, pass)
	req.Header.Set("X-Broker-API-Version", "2.17")
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	r := reply{code: resp.StatusCode, body: map[string]any{}}
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &r.body)
	return r
}

func (b *broker) s3() *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.s3Addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(rootAK, rootSK, "")})
}

func (b *broker) buckets() []string {
	b.t.Helper()
	out, err := b.s3().ListBuckets(context.Background(), &s3.ListBucketsInput{})
	if err != nil {
		b.t.Fatal(err)
	}
	var names []string
	for _, x := range out.Buckets {
		names = append(names, aws.ToString(x.Name))
	}
	return names
}

// keys maps every backend user to its access key ids.
func (b *broker) keys() map[string][]string {
	b.t.Helper()
	ctx := context.Background()
	c := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.iamAdr),
		Credentials: credentials.NewStaticCredentialsProvider(rootAK, rootSK, "")})
	out, err := c.ListUsers(ctx, &iam.ListUsersInput{})
	if err != nil {
		b.t.Fatal(err)
	}
	m := map[string][]string{}
	for _, u := range out.Users {
		ks, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: u.UserName})
		if err != nil {
			b.t.Fatal(err)
		}
		m[aws.ToString(u.UserName)] = []string{}
		for _, k := range ks.AccessKeyMetadata {
			m[aws.ToString(u.UserName)] = append(m[aws.ToString(u.UserName)], aws.ToString(k.AccessKeyId))
		}
	}
	return m
}

func works(b *broker, c map[string]any) error {
	cl := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.s3Addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c["access_key_id"].(string), c["secret_access_key"].(string), "")})
	_, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(c["bucket"].(string)),
		Key: aws.String("e2e"), Body: strings.NewReader("x")})
	return err
}
