package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// The ill broker's basic-auth credentials in every test.
const (
	IllUser = "ill"
	IllPass = "ill-password"
)

// startDir is the folder the test binary started in (its package's, in
// the module), taken before any test runs: the embedded S3 server changes
// the process's folder to its data dir, which the test then removes.
var startDir, _ = os.Getwd()

// BuildIllBroker builds test/illbroker's command into dir and returns its
// path. Call it from TestMain.
func BuildIllBroker(dir string) (string, error) {
	return goBuild(dir, "illbroker", "github.com/bucketbroker/bucketbroker/test/illbroker/cmd/illbroker")
}

// IllBroker is one running ill-behaved broker process (test/illbroker).
type IllBroker struct {
	t      testing.TB
	cmd    *exec.Cmd
	exited chan error
	log    *LockedBuffer
	// Addr is its address (host:port).
	Addr string
}

// StartIllBroker runs the ill broker with args (its flags: -seed,
// -async-delay, -fail-rate, -failed-op-rate, -duplicate-status) and waits
// until it serves. It is stopped when the test ends, and its log is shown
// if the test failed.
func StartIllBroker(t testing.TB, binary string, args ...string) *IllBroker {
	t.Helper()
	ib := &IllBroker{t: t, Addr: FreeAddr(t), log: &LockedBuffer{}}
	ib.cmd = exec.Command(binary, append([]string{"-listen", ib.Addr}, args...)...)
	ib.cmd.Env = append(os.Environ(), "ILLBROKER_USERNAME="+IllUser, "ILLBROKER_PASSWORD="+IllPass)
	ib.cmd.Stdout, ib.cmd.Stderr = ib.log, ib.log
	if err := ib.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ib.exited = make(chan error, 1)
	go func() { ib.exited <- ib.cmd.Wait() }()
	t.Cleanup(func() {
		ib.Stop()
		if t.Failed() {
			t.Logf("illbroker log (tail):\n%s", Tail(ib.log.String(), 4000))
		}
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if _, err := ib.TryState(); err == nil {
			return ib
		}
		select {
		case err := <-ib.exited:
			ib.cmd = nil
			t.Fatalf("illbroker exited at start: %v\n%s", err, ib.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("illbroker did not serve within 30s")
	return nil
}

// URL is its base URL.
func (ib *IllBroker) URL() string { return "http://" + ib.Addr }

// State reads its inspection endpoint.
func (ib *IllBroker) State() illbroker.State {
	ib.t.Helper()
	st, err := ib.TryState()
	if err != nil {
		ib.t.Fatal(err)
	}
	return st
}

// TryState is State that reports instead of failing the test.
func (ib *IllBroker) TryState() (illbroker.State, error) {
	var st illbroker.State
	resp, err := client.Get(ib.URL() + illbroker.StatePath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("illbroker state: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("illbroker state: %w", err)
	}
	return st, nil
}

// Stop stops the process (SIGTERM, then SIGKILL).
func (ib *IllBroker) Stop() {
	if ib.cmd == nil {
		return
	}
	_ = ib.cmd.Process.Signal(syscall.SIGTERM)
	// The exit status of a stopped process is not judged here (tests check
	// what it left behind); its log shows it.
	select {
	case err := <-ib.exited:
		noteExit(ib.log, err)
	case <-time.After(10 * time.Second):
		_ = ib.cmd.Process.Kill()
		noteExit(ib.log, <-ib.exited)
	}
	ib.cmd = nil
}

// Front makes the broker serve the services of the OSB broker at url as
// upstream name (--upstream, credentials in its environment), polling its
// operations every 50 ms; bucket says whether it serves the bucket service
// too.
func (b *Broker) Front(name, url, user, pass string, bucket bool) {
	b.Args = append(b.Args, "--upstream", name+"="+url, "--upstream-poll-interval", "50ms",
		fmt.Sprintf("--bucket-service=%t", bucket))
	prefix := "BUCKETBROKER_UPSTREAM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
	b.Env = append(b.Env, prefix+"USERNAME="+user, prefix+"PASSWORD="+pass)
}
