package tlsreload

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// serve runs an HTTPS server on r's configuration and returns its address.
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", r.Config())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(l) }() // returns http.ErrServerClosed at Close; served() fails if it stops early
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func served(t *testing.T, addr string, ca *harness.CA) int64 {
	t.Helper()
	n, err := harness.ServedSerial(addr, ca.Pool)
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	return n
}

// TestReloadsRotatedFiles replaces the files under a running server, as
// cert-manager does: the next connection gets the new certificate, and a
// pair that does not match is never served.
func TestReloadsRotatedFiles(t *testing.T) {
	ca := harness.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := ca.Issue(1)
	harness.WriteFiles(t, certFile, keyFile, c1, k1)
	var logs bytes.Buffer
	r, err := New(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r)
	if n := served(t, addr, ca); n != 1 {
		t.Fatalf("serial %d served, want 1", n)
	}

	c2, k2 := ca.Issue(2)
	harness.WriteFiles(t, certFile, keyFile, c2, k2)
	if n := served(t, addr, ca); n != 2 {
		t.Fatalf("after rotation: serial %d served, want 2", n)
	}

	// Half a rotation: the new certificate is written, its key not yet.
	c3, k3 := ca.Issue(3)
	if err := os.WriteFile(certFile, c3, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n := served(t, addr, ca); n != 2 {
			t.Fatalf("with a certificate whose key is not there yet: serial %d served, want 2 (the last good pair)", n)
		}
	}
	if got := strings.Count(logs.String(), "Keeping the current TLS certificate"); got != 1 {
		t.Errorf("the mismatched pair was reported %d times, want once:\n%s", got, logs.String())
	}
	if err := os.WriteFile(keyFile, k3, 0o600); err != nil {
		t.Fatal(err)
	}
	if n := served(t, addr, ca); n != 3 {
		t.Fatalf("after the key was written too: serial %d served, want 3", n)
	}

	// Files gone (a volume being remounted): keep serving.
	os.Remove(certFile)
	if n := served(t, addr, ca); n != 3 {
		t.Fatalf("with the files gone: serial %d served, want 3", n)
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Errorf("the log shows key material:\n%s", logs.String())
	}
}

// TestRefusesOldTLS: TLS 1.0 and 1.1 clients get no connection, even in a
// process whose Go runtime would serve them (GODEBUG tls10server=1, as an
// operator may set for old clients elsewhere).
func TestRefusesOldTLS(t *testing.T) {
	t.Setenv("GODEBUG", "tls10server=1")
	ca := harness.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.Issue(1)
	harness.WriteFiles(t, certFile, keyFile, c, k)
	r, err := New(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r)
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, MinVersion: v, MaxVersion: v})
		if err == nil {
			conn.Close()
			t.Errorf("a %s client connected", tls.VersionName(v))
		}
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a TLS 1.2 client: %v", err)
	}
	conn.Close()
}

func TestNewFailsClearly(t *testing.T) {
	ca := harness.NewCA(t)
	dir := t.TempDir()
	c1, _ := ca.Issue(1)
	_, k2 := ca.Issue(2)
	good, key, other := filepath.Join(dir, "c1"), filepath.Join(dir, "k1"), filepath.Join(dir, "k2")
	c, k := ca.Issue(1)
	harness.WriteFiles(t, good, key, c, k)
	harness.WriteFiles(t, filepath.Join(dir, "c2"), other, c1, k2)
	for name, tc := range map[string]struct {
		cert, key, want string
	}{
		"missing cert":   {filepath.Join(dir, "nope"), key, "nope"},
		"missing key":    {good, filepath.Join(dir, "nokey"), "nokey"},
		"key mismatch":   {good, other, "private key does not match"},
		"not PEM at all": {key, key, "load TLS certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cert, tc.key, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
