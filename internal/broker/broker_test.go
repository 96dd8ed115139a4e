package broker

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestStartFailsClearly(t *testing.T) {
	ctx := context.Background()
	badCatalog := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(badCatalog, []byte("services: []"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"unreachable backend": {Config{Config: storage.Config{Driver: DriverS3IAM, S3Endpoint: "http://" + closedPort(t), IAMEndpoint: "http://" + closedPort(t),
			RootAccessKey: "a", RootSecretKey: "b", PathStyle: true}}, "storage backend check failed"},
		"bad catalog":       {Config{CatalogFile: badCatalog}, "no services"},
		"unknown driver":    {Config{Config: storage.Config{Driver: "ceph-magic"}}, `unknown driver "ceph-magic"`},
		"TLS key alone":     {Config{TLSKeyFile: "tls.key"}, "TLS needs both"},
		"TLS files missing": {Config{TLSCertFile: "/nonexistent/tls.crt", TLSKeyFile: "/nonexistent/tls.key"}, "/nonexistent/tls.crt"},
		"bad prefix":        {Config{Config: storage.Config{Prefix: "UPPER", Driver: DriverS3IAM, S3Endpoint: "http://" + closedPort(t), IAMEndpoint: "http://" + closedPort(t), RootAccessKey: "a", RootSecretKey: "b"}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.DataDir, tc.cfg.Listen = t.TempDir(), "127.0.0.1:0"
			b, err := Start(ctx, tc.cfg)
			if err == nil {
				t.Errorf("Start succeeded; shut down: %v", b.Shutdown(ctx))
				t.FailNow()
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestServeEmbedded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Start(ctx, Config{Listen: "127.0.0.1:0", Config: storage.Config{DataDir: dir, S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := b.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	if !b.Generated.BrokerCredentials || !b.Generated.RootCredentials || b.Password == "" {
		t.Errorf("generated = %+v, want broker and root credentials generated", b.Generated)
	}
	if want := filepath.Join(dir, "broker-password"); b.Generated.PasswordFile != want {
		t.Errorf("password kept in %q, want %q", b.Generated.PasswordFile, want)
	}
	for _, f := range []string{"bucketbroker.db", "encryption.key", "s3-root-credentials.json", "broker-password"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s mode = %v, want no group/other access", f, fi.Mode().Perm())
		}
	}
	get := func(path string, auth bool) (int, string) {
		req, _ := http.NewRequest("GET", b.URL+path, nil)
		if auth {
			req.SetBasicAuth(b.Username, b.Password)
			req.Header.Set("X-Broker-API-Version", "2.17")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/readyz", false); code != 200 {
		t.Errorf("/readyz = %d", code)
	}
	if code, body := get("/v2/catalog", true); code != 200 || !strings.Contains(body, "s3-bucket") {
		t.Errorf("catalog = %d %s", code, body)
	}
	if code, _ := get("/v2/catalog", false); code != 401 {
		t.Errorf("catalog without auth = %d, want 401", code)
	}
	_, metrics := get("/metrics", false)
	for _, m := range []string{"bucketbroker_http_requests_total", "bucketbroker_operations_in_flight", "go_goroutines", "bucketbroker_build_info{"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestBrokerPasswordFile: the password generated for a data dir is the one
// every later start reads back; a file with no password in it is an error
// that says what to do, and is left as it is.
func TestBrokerPasswordFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "broker-password")
	first, err := brokerPassword(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := brokerPassword(path)
	if err != nil || again != first {
		t.Errorf("second read = %q, %v; want the first password %q", again, err, first)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("data dir holds %v, want the password file only (no temporary file left)", entries)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := brokerPassword(path); err == nil || !strings.Contains(err.Error(), "BUCKETBROKER_PASSWORD") {
		t.Errorf("empty file: err = %v, want one saying to remove it or set BUCKETBROKER_PASSWORD", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "\n" {
		t.Errorf("the empty file was changed to %q", data)
	}
}

// TestOpenStoreRefusesLostStore: a store with no schema is created on a
// first start only; where the data dir holds what an earlier start wrote
// after opening its store, the database was lost, and OpenStore refuses,
// creating nothing and saying how to start over, which StartOverStore does.
func TestOpenStoreRefusesLostStore(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		reason string
		state  []string // files in the data dir before OpenStore
		want   string   // in OpenStore's error; "" for none
	}{
		"first start":    {reason: "An empty data dir: the store is created.", state: nil},
		"encryption key": {reason: "The key is written after the store was opened.", state: []string{"encryption.key"}, want: "encryption.key"},
		"replica id":     {reason: "So is the replica id.", state: []string{"replica-id"}, want: "replica-id"},
		"embedded data":  {reason: "So is the embedded server's data.", state: []string{"s3/objects"}, want: "s3"},
		"unrelated":      {reason: "Files bucketbroker does not write after the store say nothing.", state: []string{"notes.txt"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.state {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := OpenStore(ctx, "", dir)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("OpenStore: %v\n%s", err, tc.reason)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatalf("OpenStore succeeded, want store.ErrLost\n%s", tc.reason)
			}
			if !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "admin migrate --new-store") {
				t.Errorf("OpenStore = %v, want store.ErrLost naming %q and how to start over\n%s", err, tc.want, tc.reason)
			}
			if _, err := os.Stat(filepath.Join(dir, "bucketbroker.db")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused OpenStore left a database file: %v", err)
			}
			s, err = StartOverStore(ctx, "", dir)
			if err != nil {
				t.Fatalf("StartOverStore: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Started over: the store has its schema now, and opens.
			s, err = OpenStore(ctx, "", dir)
			if err != nil {
				t.Fatalf("OpenStore after starting over: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
