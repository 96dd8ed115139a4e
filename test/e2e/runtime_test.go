package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestGeneratedPasswordSurvivesRestart: a broker given no password makes
// one at its first start, keeps it in the data dir (0600) and serves with
// it after a restart, so that a platform registered with it keeps working.
// Its output, which a pod's log keeps, never shows it; the embedded
// server's own prints come through the logger like every other line.
func TestGeneratedPasswordSurvivesRestart(t *testing.T) {
	b := newBroker(t)
	b.Env = append(b.Env, "BUCKETBROKER_PASSWORD=") // later entries win: none given
	b.Start()
	file := filepath.Join(b.DataDir, "broker-password")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("generated password not kept: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode = %v, want 0600", file, fi.Mode().Perm())
	}
	data, _ := os.ReadFile(file)
	b.Password = strings.TrimSpace(string(data))
	if len(b.Password) < 20 {
		t.Fatalf("generated password %d characters long, want at least 20", len(b.Password))
	}
	inst := "/v2/service_instances/kept-password"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)

	b.Stop()
	b.Start()
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	if err := b.Backend.Works(c); err != nil {
		t.Errorf("credentials of a bind after the restart: %v", err)
	}
	again, _ := os.ReadFile(file)
	if strings.TrimSpace(string(again)) != b.Password {
		t.Error("the password file changed across a restart")
	}
	wrong := *b
	wrong.Password = "not-" + b.Password
	if r := wrong.Do("GET", "/v2/catalog", nil); r.Code != http.StatusUnauthorized {
		t.Errorf("catalog with another password: %s, want 401", r)
	}

	log := b.Log()
	if strings.Contains(log, b.Password) {
		t.Error("the process's output shows the generated password")
	}
	if !strings.Contains(log, file) {
		t.Errorf("the banner does not say %s keeps the password", file)
	}
	// versitygw's prints are records too.
	checkEveryLineLogged(t, log)
	if !strings.Contains(log, `msg="Embedded S3 server output" line="initializing standalone IAM`) {
		t.Errorf("the embedded server's start-up lines are not in the log:\n%s", harness.Tail(log, 3000))
	}
}

// TestTLS serves the OSB API with a certificate from a CA made here:
// provision and bind work over HTTPS, a rotated pair is served at the next
// connection without a restart, and plain HTTP and TLS 1.1 get nothing.
func TestTLS(t *testing.T) {
	ca := harness.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := ca.Issue(1)
	harness.WriteFiles(t, certFile, keyFile, c1, k1)
	b := newBroker(t)
	b.Args = []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}
	b.CA = ca.Pool
	b.Start()
	if n, err := harness.ServedSerial(b.API, ca.Pool); err != nil || n != 1 {
		t.Fatalf("served certificate: serial %d, %v; want 1", n, err)
	}
	inst := "/v2/service_instances/tls"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	if err := b.Backend.Works(c); err != nil {
		t.Errorf("credentials bound over HTTPS: %v", err)
	}
	if !b.LogShows(30*time.Second, "broker URL:    https://"+b.API) {
		t.Errorf("the banner does not give the https URL:\n%s", harness.Tail(b.Log(), 2000))
	}

	c2, k2 := ca.Issue(2)
	harness.WriteFiles(t, certFile, keyFile, c2, k2)
	if n, err := harness.ServedSerial(b.API, ca.Pool); err != nil || n != 2 {
		t.Fatalf("after rotating the files: serial %d, %v; want 2", n, err)
	}
	untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusOK)

	if resp, err := http.Get("http://" + b.API + "/v2/catalog"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "services") {
			t.Errorf("plain HTTP got %d %s, want Go's 400 for HTTP on an HTTPS port", resp.StatusCode, body)
		}
	}
	if conn, err := tls.Dial("tcp", b.API, &tls.Config{RootCAs: ca.Pool, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("a TLS 1.1 client connected")
	}
	// net/http's own messages about them are records too. The server
	// writes them after the client has seen the refusal: wait for them.
	if !b.LogShows(30*time.Second, `msg="TLS handshake failed"`) {
		t.Errorf("the refused handshakes are not logged:\n%s", harness.Tail(b.Log(), 3000))
	}
	checkEveryLineLogged(t, b.Log())

	resp, err := b.Client().Get(b.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `bucketbroker_build_info{goversion="`+runtime.Version()+`"`) {
		t.Errorf("/metrics lacks bucketbroker_build_info with the Go version:\n%s", harness.Tail(string(metrics), 2000))
	}
}

// checkEveryLineLogged checks that every line of a broker's output is the
// banner, the harness's marker, or a log record (--log-format text).
func checkEveryLineLogged(t *testing.T, log string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if !strings.HasPrefix(line, "time=") && !strings.HasPrefix(line, "=== ") &&
			!strings.HasPrefix(line, "bucketbroker is serving") && !strings.HasPrefix(line, "  ") {
			t.Errorf("a line outside the logger: %q", line)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	out, err := exec.Command(binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("bucketbroker version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "bucketbroker ") || !strings.Contains(string(out), "commit ") ||
		!strings.Contains(string(out), runtime.Version()) {
		t.Errorf("bucketbroker version printed %q, want the version, the commit and %s", out, runtime.Version())
	}
}
