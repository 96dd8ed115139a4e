package harness

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
)

// The broker's OSB credentials and the embedded backend's root keys in every
// test: fixed, so that a restarted process serves the same data dir.
const (
	User   = "e2e"
	Pass   = "e2e-password"
	RootAK = "E2EROOTACCESSKEY0001"
	RootSK = "e2erootsecretkeythatislongenoughtobeok1"
)

// Build builds the bucketbroker binary into dir and returns its path. Call
// it from TestMain: a test package builds it once.
func Build(dir string) (string, error) {
	return goBuild(dir, "bucketbroker", "github.com/bucketbroker/bucketbroker/cmd/bucketbroker")
}

// goBuild builds the command pkg into dir/name, as the image is built
// (hack/image.sh: CGO_ENABLED=0, -trimpath): the binary under test is the
// one that ships, and its packages are compiled once into Go's build cache
// for the image, `go vet`, golangci-lint and every test package's binary
// (hack/tools.sh compiles them first).
func goBuild(dir, name, pkg string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Dir = startDir // the module's: a test may have left the process in a removed folder
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return bin, nil
}

// FreeAddr returns a loopback address nothing listens on right now, for a
// process the test starts (and restarts) later on it. The port is drawn at
// random below the kernel's ephemeral range (32768-60999 by default), where
// the source ports of outgoing connections never land: a port the kernel
// handed out with ":0" may be given to a client connection before the
// process binds it, and the start then fails with "address already in use".
//
// A port is handed out once per test binary, and never to two test binaries
// at a time: each one handed out is reserved in a file named for it under
// the temporary directory, holding the pid of the binary that took it, and
// another binary takes it only once that pid is gone. A process the test
// stopped and restarts later on the same port (a crash cell) keeps it while
// other tests, in this package or in one `go test ./...` runs beside it,
// draw theirs. hack/ scripts draw their servers' ports from below
// portMin, so they never meet these either.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 500 {
		port := portMin + rand.IntN(portMax-portMin)
		ok, err := reservePort(port)
		if err != nil {
			t.Fatalf("reserve a test port: %v", err)
		}
		if !ok {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// Reserved but taken by a process that reserves nothing: it stays
		// reserved (it is this binary's now) and is not used.
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free port between %d and %d after 500 draws", portMin, portMax)
	return ""
}

// The range FreeAddr draws from: above the hack/ scripts' servers
// (20000-23999) and below the kernel's ephemeral range.
const portMin, portMax = 24000, 32768

// reservePort reserves port for this process, reporting false when another
// live process, or this one, reserved it already. The directory's lock
// makes the check of a stale holder and the new reservation one step for
// every test binary on the machine.
func reservePort(port int) (bool, error) {
	dir := filepath.Join(os.TempDir(), "bucketbroker-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return false, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	name := filepath.Join(dir, strconv.Itoa(port))
	if b, err := os.ReadFile(name); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && (pid == os.Getpid() || processAlive(pid)) {
			return false, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, os.WriteFile(name, []byte(strconv.Itoa(os.Getpid())), 0o666)
}

// processAlive reports whether a process with this pid exists (a pid reused
// by an unrelated process keeps a port reserved: harmless, there are plenty).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Broker is one bucketbroker process. Its ports and data dir survive
// restarts, as they would for a platform.
type Broker struct {
	t       testing.TB
	binary  string
	DataDir string
	// API is the OSB address (host:port).
	API string
	// Backend is where the broker keeps buckets and users: the embedded
	// server on addresses of its own, or an external one (see External).
	Backend Backend
	// Args and Env are added to every start (another driver or store).
	Args, Env []string
	// Password, when set, replaces Pass in requests: for a broker whose
	// password was generated (Env holds an empty BUCKETBROKER_PASSWORD).
	Password string
	// CA, when set, makes every request HTTPS, trusting only these roots:
	// for a broker started with --tls-cert-file (in Args).
	CA *x509.CertPool
	// SyncBudget is the broker's --sync-budget. It is zero unless a test
	// sets it: every accepts_incomplete=true call answers 202, as the tests
	// written before the budget expect.
	SyncBudget time.Duration

	embedded     bool
	s3Ad, iamAdr string
	cmd          *exec.Cmd
	exited       chan error
	log          *LockedBuffer
}

// New returns a broker on the embedded S3 + IAM server and SQLite, in a
// fresh data dir. It is stopped when the test ends, and its log is shown if
// the test failed.
func New(t testing.TB, binary string) *Broker {
	b := &Broker{t: t, binary: binary, DataDir: t.TempDir(), API: FreeAddr(t), embedded: true,
		s3Ad: FreeAddr(t), iamAdr: FreeAddr(t), log: &LockedBuffer{}}
	b.Backend = Backend{S3: "http://" + b.s3Ad, IAM: "http://" + b.iamAdr, AccessKey: RootAK, SecretKey: RootSK}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("broker log (tail):\n%s", Tail(b.Log(), 6000))
		}
	})
	return b
}

// External returns a broker on the s3iam driver against backend, with its
// own SQLite store. Its names start with backend.Prefix, which should be
// set when the backend is shared.
func External(t testing.TB, binary string, backend Backend) *Broker {
	b := New(t, binary)
	b.embedded = false
	b.Backend = backend
	b.Args = []string{"--driver", "s3iam", "--s3-endpoint", backend.S3, "--iam-endpoint", backend.IAM, "--path-style"}
	if backend.Prefix != "" {
		b.Args = append(b.Args, "--name-prefix", backend.Prefix)
	}
	b.Env = []string{"BUCKETBROKER_S3_ROOT_ACCESS_KEY=" + backend.AccessKey, "BUCKETBROKER_S3_ROOT_SECRET_KEY=" + backend.SecretKey}
	return b
}

// Log returns everything the process (all its runs) wrote.
func (b *Broker) Log() string { return b.log.String() }

// LogShows waits up to timeout for every one of subs to appear in the log:
// the process writes a line before or after the answer a test saw, and the
// harness reads its output through a pipe, so a line may come a little
// after the event it follows.
func (b *Broker) LogShows(timeout time.Duration, subs ...string) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		log, all := b.Log(), true
		for _, s := range subs {
			all = all && strings.Contains(log, s)
		}
		if all {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Start runs the broker, with crash points armed if any are given, and
// waits until it serves.
func (b *Broker) Start(crashAt ...string) {
	b.t.Helper()
	if err := b.TryStart(crashAt...); err != nil {
		b.t.Fatal(err)
	}
}

// TryStart is Start that reports instead of failing the test.
func (b *Broker) TryStart(crashAt ...string) error {
	fmt.Fprintf(b.log, "=== start %s (crash at %q)\n", time.Now().Format(time.StampMilli), crashAt)
	b.cmd = exec.Command(b.binary, "serve", "--listen", b.API, "--data-dir", b.DataDir, "--log-format", "text")
	if b.embedded {
		b.cmd.Args = append(b.cmd.Args, "--s3-listen", b.s3Ad, "--iam-listen", b.iamAdr)
	}
	b.cmd.Args = append(b.cmd.Args, "--sync-budget", b.SyncBudget.String())
	b.cmd.Args = append(b.cmd.Args, b.Args...)
	b.cmd.Env = append(os.Environ(), "BUCKETBROKER_USERNAME="+User, "BUCKETBROKER_PASSWORD="+Pass,
		"BUCKETBROKER_S3_ROOT_ACCESS_KEY="+RootAK, "BUCKETBROKER_S3_ROOT_SECRET_KEY="+RootSK,
		crashpoint.EnvVar+"="+strings.Join(crashAt, ","))
	b.cmd.Env = append(b.cmd.Env, b.Env...) // later entries win
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.exited = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(b.cmd, b.exited)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := b.Client().Get(b.URL() + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-b.exited:
			b.cmd = nil
			return fmt.Errorf("broker exited at start: %w", exitErr(err))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("broker did not serve within 30s")
}

// URL is the OSB API's base URL.
func (b *Broker) URL() string {
	if b.CA != nil {
		return "https://" + b.API
	}
	return "http://" + b.API
}

// Client is the HTTP client requests to the broker go through.
func (b *Broker) Client() *http.Client {
	if b.CA == nil {
		return client
	}
	// A transport per call: a test that rotates the certificate wants a
	// new handshake for each request.
	return &http.Client{Timeout: client.Timeout, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: b.CA, MinVersion: tls.VersionTLS12}}}
}

// WaitCrash waits for the process to exit at a crash point.
func (b *Broker) WaitCrash() {
	b.t.Helper()
	if err := b.TryWaitCrash(30 * time.Second); err != nil {
		b.t.Fatal(err)
	}
}

// TryWaitCrash waits up to d for the process to exit at a crash point and
// reports whether it did.
func (b *Broker) TryWaitCrash(d time.Duration) error {
	if b.cmd == nil {
		return fmt.Errorf("broker is not running")
	}
	select {
	case err := <-b.exited:
		b.cmd = nil
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != crashpoint.ExitCode {
			return fmt.Errorf("broker exited with %w, want exit code %d at a crash point", exitErr(err), crashpoint.ExitCode)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("broker did not reach its crash point within %s", d)
	}
}

// Stop stops the broker gracefully (SIGTERM), as a rolling restart would.
func (b *Broker) Stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	// The exit status of a stopped process is not judged here (tests check
	// what it left behind); its log shows it.
	select {
	case err := <-b.exited:
		noteExit(b.log, err)
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		noteExit(b.log, <-b.exited)
	}
	b.cmd = nil
}

// Kill kills the broker with SIGKILL, as an OOM killer or a node failure
// would, and waits until it is gone. Nothing of the process runs after
// the signal: no deferred function, no graceful shutdown.
func (b *Broker) Kill() {
	if b.cmd == nil {
		return
	}
	fmt.Fprintf(b.log, "=== kill -9 %s\n", time.Now().Format(time.StampMilli))
	_ = b.cmd.Process.Kill()
	noteExit(b.log, <-b.exited)
	b.cmd = nil
}

// Audit runs `bucketbroker admin audit --output json` on the broker's data
// dir, with args added (--fix --yes), and returns its exit status and
// output. Status 0 is no drift, 2 is drift found (printed), 1 the audit
// could not run. On the embedded server the broker must be stopped: the
// audit starts the server itself, on the broker's addresses; an external
// one is audited beside the running broker, as an operator would.
func (b *Broker) Audit(args ...string) (int, string, error) {
	if b.cmd != nil && b.embedded {
		return 1, "", fmt.Errorf("audit: stop the broker first (the audit starts the embedded server on its addresses)")
	}
	cmd := exec.Command(b.binary, "admin", "audit", "--output", "json", "--data-dir", b.DataDir)
	if b.embedded {
		cmd.Args = append(cmd.Args, "--s3-listen", b.s3Ad, "--iam-listen", b.iamAdr)
	}
	cmd.Args = append(cmd.Args, b.Args...)
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(os.Environ(), "BUCKETBROKER_S3_ROOT_ACCESS_KEY="+RootAK, "BUCKETBROKER_S3_ROOT_SECRET_KEY="+RootSK)
	cmd.Env = append(cmd.Env, b.Env...)
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), nil
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), nil
	default:
		return 1, out.String(), err
	}
}

// LockedBuffer collects a process's output while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
