package crash

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// versitygw is a versitygw pair (S3 gateway + IAM service) of this test's
// own, run by hack/versitygw.sh, so that stopping it disturbs nobody else.
// The broker reaches it through two proxies of fixed address, because a
// restarted pair listens on new ports.
type versitygw struct {
	t       *testing.T
	dir     string
	s3, iam *proxy
	env     map[string]string
}

func startVersitygw(t *testing.T) *versitygw {
	if os.Getenv("BUCKETBROKER_TEST_VERSITYGW") == "" && os.Getenv("BUCKETBROKER_TEST_S3_ENDPOINT") == "" && os.Getenv("CI") != "true" {
		t.Skip("needs versitygw built: run `make test-crash` or `make test` (hack/versitygw.sh build)")
	}
	base, err := os.MkdirTemp("", "bb-vgw-")
	if err != nil {
		t.Fatal(err)
	}
	v := &versitygw{t: t, dir: filepath.Join(base, "vgw"), s3: newProxy(t), iam: newProxy(t)}
	t.Cleanup(func() {
		v.ctl("stop")
		if t.Failed() {
			for _, f := range []string{"s3.log", "iam.log"} {
				data, _ := os.ReadFile(filepath.Join(v.dir, f))
				t.Logf("versitygw %s (tail):\n%s", f, harness.Tail(string(data), 2000))
			}
		}
		os.RemoveAll(base)
	})
	v.start()
	return v
}

func (v *versitygw) ctl(verb string) string {
	v.t.Helper()
	cmd := exec.Command("../../hack/versitygw.sh", verb, v.dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		v.t.Fatalf("hack/versitygw.sh %s: %v\n%s", verb, err, stderr)
	}
	return string(out)
}

// start starts the pair (again) and points the proxies at it.
func (v *versitygw) start() {
	v.env = map[string]string{}
	for _, line := range strings.Split(v.ctl("start"), "\n") {
		if k, val, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "="); ok {
			v.env[k] = val
		}
	}
	v.s3.point(strings.TrimPrefix(v.env["BUCKETBROKER_TEST_S3_ENDPOINT"], "http://"))
	v.iam.point(strings.TrimPrefix(v.env["BUCKETBROKER_TEST_IAM_ENDPOINT"], "http://"))
}

func (v *versitygw) stop() { v.ctl("stop") }

func (v *versitygw) backend() harness.Backend {
	return harness.Backend{S3: "http://" + v.s3.addr(), IAM: "http://" + v.iam.addr(),
		AccessKey: v.env["BUCKETBROKER_TEST_S3_ACCESS_KEY"], SecretKey: v.env["BUCKETBROKER_TEST_S3_SECRET_KEY"]}
}

// proxy forwards TCP connections to whatever address it points at; when
// nothing listens there, it closes the connection, as a load balancer
// without a live backend does.
type proxy struct {
	l      net.Listener
	target atomic.Value
	wg     sync.WaitGroup
}

func newProxy(t *testing.T) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	p.target.Store("")
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) addr() string        { return p.l.Addr().String() }
func (p *proxy) point(target string) { p.target.Store(target) }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", p.target.Load().(string), 2*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done // either side closed: close both
		}()
	}
}

// latencies measures the calls the broker must keep answering fast whatever
// the backend does: the catalog and a last_operation poll.
func latencies(t *testing.T, b *harness.Broker, lastOp string) (worst time.Duration) {
	t.Helper()
	for range 5 {
		for _, path := range []string{"/v2/catalog", lastOp} {
			r := b.Do("GET", path, nil)
			if r.Err != nil || r.Code != http.StatusOK {
				t.Fatalf("GET %s: %s", path, r)
			}
			worst = max(worst, r.Took)
		}
	}
	return worst
}

// asyncPut sends an async PUT and returns its operation.
func asyncPut(t *testing.T, b *harness.Broker, path string, body any) string {
	t.Helper()
	r := b.Do("PUT", path+"?accepts_incomplete=true", body)
	if r.Err != nil || r.Code != http.StatusAccepted || r.Operation() == "" {
		t.Fatalf("async PUT %s: %s, want 202 with an operation", path, r)
	}
	return r.Operation()
}

func lastOpPath(path, op string) string { return path + "/last_operation?operation=" + op }

// waitState polls an operation until it reaches state, or fails the test
// after d.
func waitState(t *testing.T, b *harness.Broker, path, op, state string, d time.Duration) harness.Reply {
	t.Helper()
	r, err := b.LastOperation(d, path, op)
	if err != nil || r.State() != state {
		t.Fatalf("operation %s of %s: %s %v, want %s", op, path, r, err, state)
	}
	return r
}

// TestBackendOutage stops the S3 + IAM server under asynchronous
// operations and starts it again; then, with a short --async-timeout,
// keeps it down until operations fail, and retries them as a platform
// would once it is back.
func TestBackendOutage(t *testing.T) {
	vgw := startVersitygw(t)
	b := harness.External(t, binary, vgw.backend())
	b.Args = append(b.Args, "--async-timeout", "5m")
	b.Start()

	inst := "/v2/service_instances/"
	up, upBind := inst+"up", inst+"up/service_bindings/up-b"
	op := asyncPut(t, b, up, harness.ProvisionBody)
	waitState(t, b, up, op, "succeeded", replay)
	upCreds := b.Do("PUT", upBind, harness.BindBody).Creds()
	if err := b.Backend.Works(upCreds); err != nil {
		t.Fatalf("bind before the outage: %v", err)
	}
	baseline := latencies(t, b, lastOpPath(up, op))

	// Operations in flight when the server stops, and operations that
	// start while it is down.
	ops := map[string]string{}
	for _, id := range []string{"mid-0", "mid-1", "mid-2"} {
		ops[inst+id] = asyncPut(t, b, inst+id, harness.ProvisionBody)
	}
	vgw.stop()
	ops[inst+"down"] = asyncPut(t, b, inst+"down", harness.ProvisionBody)
	downBind := inst + "up/service_bindings/down-b"
	ops[downBind] = asyncPut(t, b, downBind, harness.BindBody)
	for _, path := range []string{inst + "down", downBind} {
		deadline := time.Now().Add(replay)
		for {
			r := b.Do("GET", lastOpPath(path, ops[path]), nil)
			if r.State() != "in progress" {
				t.Fatalf("%s while the backend is down: %s, want in progress", path, r)
			}
			if strings.Contains(r.Description(), "backend error") {
				t.Logf("%s while the backend is down: %s: %q", path, r.State(), r.Description())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no backend error in the description after %s: %s", path, replay, r)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	down := latencies(t, b, lastOpPath(inst+"down", ops[inst+"down"]))
	t.Logf("slowest catalog or last_operation answer: %s with the backend up, %s with it down", baseline, down)
	if down > 2*time.Second {
		t.Errorf("the broker answered catalog or last_operation in %s while the backend was down, want under 2s (up: %s)", down, baseline)
	}

	vgw.start()
	for path, op := range ops {
		waitState(t, b, path, op, "succeeded", 2*time.Minute)
	}
	downCreds := b.Do("GET", downBind, nil).Creds()
	for _, c := range []map[string]any{upCreds, downCreds} {
		if err := b.Backend.Works(c); err != nil {
			t.Errorf("credentials %v after the outage: %v", c["access_key_id"], err)
		}
	}
	checkBackend(t, b, []string{"up", "mid-0", "mid-1", "mid-2", "down"}, upCreds, downCreds)

	// An operation whose backend stays down past --async-timeout fails;
	// the platform's retry succeeds once the backend is back.
	b.Stop()
	b.Args = append(b.Args, "--async-timeout", "3s")
	b.Start()
	vgw.stop()
	late, lateBind := inst+"late", inst+"up/service_bindings/late-b"
	lateOp, lateBindOp := asyncPut(t, b, late, harness.ProvisionBody), asyncPut(t, b, lateBind, harness.BindBody)
	for path, op := range map[string]string{late: lateOp, lateBind: lateBindOp} {
		r := waitState(t, b, path, op, "failed", replay)
		t.Logf("%s with the backend down past --async-timeout: %s: %q", path, r.State(), r.Description())
	}
	vgw.start()
	for _, path := range []string{late, lateBind} {
		body := map[bool]any{true: harness.BindBody, false: harness.ProvisionBody}[strings.Contains(path, "service_bindings")]
		retry := asyncPut(t, b, path, body)
		waitState(t, b, path, retry, "succeeded", replay)
		if r := b.Do("PUT", path, body); r.Code != http.StatusOK {
			t.Errorf("PUT %s after the retry succeeded: %s, want 200", path, r)
		}
	}
	lateCreds := b.Do("GET", lateBind, nil).Creds()
	if err := b.Backend.Works(lateCreds); err != nil {
		t.Errorf("credentials of the retried bind: %v", err)
	}
	checkBackend(t, b, []string{"up", "mid-0", "mid-1", "mid-2", "down", "late"}, upCreds, downCreds, lateCreds)

	r := &run{t: t, b: b, out: converged}
	r.noneInProgress()
	if !r.ok() {
		t.Errorf("after the outages: %v", r.notes)
	}
}

// checkBackend checks that the backend holds one bucket per instance and one
// user per binding holding exactly the key the broker answered.
func checkBackend(t *testing.T, b *harness.Broker, instances []string, creds ...map[string]any) {
	t.Helper()
	names, err := b.Backend.Buckets()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(instances) {
		t.Errorf("buckets %v, want %d: one per instance %v", names, len(instances), instances)
	}
	users, err := b.Backend.Keys()
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, c := range creds {
		want = append(want, c["access_key_id"].(string))
	}
	for _, keys := range users {
		got = append(got, keys...)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(users) != len(creds) || !slices.Equal(got, want) {
		t.Errorf("users and keys %v, want %d users holding exactly %v", users, len(creds), want)
	}
}
