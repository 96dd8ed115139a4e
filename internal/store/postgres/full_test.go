package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// bigRecord is a record with a few KiB of parameters that PostgreSQL
// cannot compress away: random hex.
func bigRecord(t *testing.T, id string) *engine.Record {
	t.Helper()
	pad := make([]byte, 3000)
	if _, err := rand.Read(pad); err != nil {
		t.Fatal(err)
	}
	r := record(id)
	r.Request.Parameters = []byte(`{"pad":"` + hex.EncodeToString(pad) + `"}`)
	return r
}

// TestWritableOnFullDisk moves a server's bucketbroker database to a
// small disk of its own (a tmpfs tablespace; the write-ahead log stays on
// the server's disk, as with a data volume apart from the log's) and fills
// that disk: writes fail with engine.ErrFull, in PostgreSQL's words, and
// Writable reports it as long as the disk stays full, without a write from
// outside (a row rewritten in place, which still fits in its page, is not
// proof of room). Once space is freed, Writable finds it by itself within
// a few probes, and writes succeed again.
//
// Without the TEMPORARY privilege on the database, the probe falls back to
// a row rewritten in place: it may pass on the full disk, but readiness
// must come back by itself once space is freed, not stay failed for want
// of a privilege.
func TestWritableOnFullDisk(t *testing.T) {
	t.Run("temporary", func(t *testing.T) { testWritableOnFullDisk(t, true) })
	t.Run("no-temporary", func(t *testing.T) { testWritableOnFullDisk(t, false) })
}

func testWritableOnFullDisk(t *testing.T, temporary bool) {
	disk := harness.SmallDisk(t, 48<<20) // before the server: unmounted after it stops
	pg := harness.NewPostgres(t)
	pg.MoveTo(disk)
	if !temporary {
		pg.SQL("REVOKE TEMPORARY ON DATABASE bucketbroker FROM PUBLIC, bucketbroker")
	}
	s := open(t, pg.DSN)
	ctx := t.Context()
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable on a disk with room: %v", err)
	}
	if err := s.Insert(ctx, bigRecord(t, "before")); err != nil {
		t.Fatal(err)
	}
	free := harness.FillDisk(t, disk)

	var err error
	for i := 0; err == nil; i++ {
		if i == 2000 {
			t.Fatalf("%d inserts succeeded on a full disk", i)
		}
		err = s.Insert(ctx, bigRecord(t, fmt.Sprintf("full-%d", i)))
	}
	if !errors.Is(err, engine.ErrFull) || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("Insert on a full disk = %v, want engine.ErrFull saying No space left on device", err)
	}
	// Probes, as readiness checks make them, while the disk stays full.
	for i := range 3 {
		if !temporary {
			break // the fallback probe may pass on a full disk
		}
		if i > 0 {
			time.Sleep(store.ProbeInterval)
		}
		if err := s.Writable(ctx); !errors.Is(err, engine.ErrFull) {
			t.Fatalf("Writable on a full disk (probe %d) = %v, want engine.ErrFull", i+1, err)
		}
	}

	free()
	deadline := time.Now().Add(10 * store.ProbeInterval)
	for err := s.Writable(ctx); err != nil; err = s.Writable(ctx) {
		if time.Now().After(deadline) {
			t.Fatalf("Writable after space was freed: still %v", err)
		}
		time.Sleep(store.ProbeInterval / 10)
	}
	if err := s.Insert(ctx, bigRecord(t, "after")); err != nil {
		t.Errorf("Insert after space was freed: %v", err)
	}
	r, err := s.Get(ctx, engine.KindBinding, "before")
	if err != nil {
		t.Fatal(err)
	}
	r.Phase = engine.PhaseReady
	if err := s.Update(ctx, r); err != nil {
		t.Errorf("Update after space was freed: %v", err)
	}
}
