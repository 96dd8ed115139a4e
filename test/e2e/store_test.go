package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestLostStoreRefused empties the stopped broker's SQLite file, as a
// failed restore or copy does. The next start refuses, saying what
// happened and how to start over, and leaves the file as it was; it
// refuses too when the store's own marker is gone as well, from the data
// dir's state. Starting over is the explicit act `admin migrate
// --new-store`, after which the broker starts with an empty store.
func TestLostStoreRefused(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/kept"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	b.Stop()

	db := filepath.Join(b.DataDir, "bucketbroker.db")
	if err := os.Truncate(db, 0); err != nil {
		t.Fatal(err)
	}
	refused := func(why string, says ...string) {
		t.Helper()
		if err := b.TryStart(); err == nil {
			r := b.Do("GET", inst, nil)
			b.Stop()
			t.Fatalf("start on an emptied store (%s) succeeded; GET of the recorded instance: %v", why, r)
		}
		for _, s := range append(says, "the store is empty, but records were kept before", "bucketbroker admin migrate --new-store") {
			if !strings.Contains(b.Log(), s) {
				t.Errorf("the refused start (%s) does not say %q:\n%s", why, s, harness.Tail(b.Log(), 2000))
			}
		}
		if fi, err := os.Stat(db); err != nil || fi.Size() != 0 {
			t.Errorf("the refused start (%s) changed the emptied file: %v, %v", why, fi, err)
		}
	}
	refused("marker", "bucketbroker.db.created")
	// As a restore of the file without its marker.
	if err := os.Remove(db + ".created"); err != nil {
		t.Fatal(err)
	}
	refused("data dir", "encryption.key")

	out, err := exec.Command(binary, "admin", "migrate", "--new-store", "--data-dir", b.DataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("admin migrate --new-store: %v\n%s", err, out)
	}
	b.Start()
	if r := b.Do("GET", inst, nil); r.Code != http.StatusNotFound {
		t.Errorf("GET of an instance of the lost store after starting over: %v, want 404", r)
	}
	untilDone(t, b, "PUT", "/v2/service_instances/new", provisionBody, http.StatusCreated)
}

// TestFullDisk fills the disk under the broker's SQLite store (a small
// tmpfs; the embedded server's data stays elsewhere); see fullDisk.
func TestFullDisk(t *testing.T) {
	disk := harness.SmallDisk(t, 8<<20)
	b := newBroker(t)
	b.Args = append(b.Args, "--store", filepath.Join(disk, "bucketbroker.db"))
	fullDisk(t, b, disk, "database or disk is full")
}

// TestFullDiskPostgres fills the disk under the broker's PostgreSQL
// database (moved to a small tmpfs tablespace of its own, while the
// server's write-ahead log stays on its disk: a data volume apart from the
// log's); see fullDisk.
func TestFullDiskPostgres(t *testing.T) {
	disk := harness.SmallDisk(t, 48<<20) // before the server: unmounted after it stops
	pg := harness.NewPostgres(t)
	pg.MoveTo(disk)
	b := newBroker(t)
	b.Env = append(b.Env, "BUCKETBROKER_STORE="+pg.DSN)
	fullDisk(t, b, disk, "No space left on device")
}

// fullDisk starts b, provisions, and fills disk, which holds b's store. A
// provision is answered 503, /readyz fails naming the store, and the log
// says that the store cannot write because the disk is full (with cause,
// the database's own words), not that it cannot be reached. Once space is
// freed, /readyz is ready again by itself and the platform's retry
// provisions.
func fullDisk(t *testing.T, b *harness.Broker, disk, cause string) {
	t.Helper()
	b.Start()
	untilDone(t, b, "PUT", "/v2/service_instances/before", provisionBody, http.StatusCreated)
	untilDone(t, b, "GET", "/readyz", nil, http.StatusOK)

	free := harness.FillDisk(t, disk)
	during := "/v2/service_instances/during"
	// A write may still fit in what the store's files hold: the platform
	// retries, with other instances too, until the disk tells.
	var r harness.Reply
	for i := range 50 {
		r = b.Do("PUT", fmt.Sprintf("%s-%d", during, i), provisionBody)
		if r.Code != http.StatusCreated {
			break
		}
	}
	if r.Code != http.StatusServiceUnavailable || !strings.Contains(r.Description(), "disk is full") {
		t.Errorf("provision on a full disk: %v, want 503 with a description that says the disk is full", r)
	}
	r, err := b.Until(10*time.Second, "GET", "/readyz", nil, http.StatusServiceUnavailable)
	if err != nil {
		t.Errorf("/readyz on a full disk: %v", err)
	} else if r.Body["failed"] != "store" {
		t.Errorf("/readyz on a full disk: %v, want the failed check named \"store\"", r)
	}
	if !b.LogShows(10*time.Second, "Store cannot write", "the broker's store cannot write: database or disk is full", cause,
		"readiness check: store: write to the store:") {
		t.Errorf("the log does not say that the store cannot write for a full disk (%s):\n%s", cause, harness.Tail(b.Log(), 3000))
	}
	if strings.Contains(b.Log(), "cannot be reached") {
		t.Errorf("the log says the store cannot be reached; it can, but the disk is full:\n%s", harness.Tail(b.Log(), 3000))
	}
	// Still full: still not ready, however often it is asked.
	time.Sleep(2 * time.Second)
	if r := b.Do("GET", "/readyz", nil); r.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the disk stays full: %v, want 503", r)
	}

	free()
	untilDone(t, b, "GET", "/readyz", nil, http.StatusOK)
	untilDone(t, b, "PUT", during, provisionBody, http.StatusCreated)
	for _, path := range []string{"/v2/service_instances/before", during} {
		untilDone(t, b, "PUT", path, provisionBody, http.StatusOK)
	}
}
