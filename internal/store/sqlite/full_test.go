package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// bigRecord is a record with a few KiB of parameters: a page or more.
func bigRecord(id string) *engine.Record {
	r := record(id)
	r.Request.Parameters = []byte(`{"pad":"` + strings.Repeat("x", 6000) + `"}`)
	return r
}

// insertUntilFull inserts records until one fails, and returns its error;
// the test fails if none has after n.
func insertUntilFull(t *testing.T, s *Store, prefix string, n int) error {
	t.Helper()
	for i := range n {
		if err := s.Insert(t.Context(), bigRecord(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
			return err
		}
	}
	t.Fatalf("%d inserts succeeded on a full database", n)
	return nil
}

// TestInsertWhenFull: a write that finds no room (here SQLite's own limit,
// max_page_count) fails with engine.ErrFull, in SQLite's words, and
// writes nothing.
func TestInsertWhenFull(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "bucketbroker.db"))
	if _, err := s.writer.ExecContext(t.Context(), `PRAGMA max_page_count = 1`); err != nil { // the database's size, at least
		t.Fatal(err)
	}
	err := insertUntilFull(t, s, "r", 100)
	if !errors.Is(err, engine.ErrFull) || !strings.Contains(err.Error(), "database or disk is full") {
		t.Errorf("Insert on a full database = %v, want engine.ErrFull saying database or disk is full", err)
	}
	if _, err := s.Get(t.Context(), engine.KindBinding, "r-0"); err == nil {
		// The first insert may have fit; then another one failed.
		if _, err := s.Get(t.Context(), engine.KindBinding, "r-99"); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Get of a record whose insert failed: %v, want ErrNotFound", err)
		}
	}
}

// TestWritableOnFullDisk fills the disk under a store for real (a small
// tmpfs): writes fail with engine.ErrFull, and Writable reports it as long
// as the disk stays full, without a write from outside; once space is
// freed, Writable finds it by itself, within a few probes, and writes
// succeed again.
func TestWritableOnFullDisk(t *testing.T) {
	disk := harness.SmallDisk(t, 4<<20)
	s := open(t, filepath.Join(disk, "bucketbroker.db"))
	if err := s.Writable(t.Context()); err != nil {
		t.Fatalf("Writable on a disk with room: %v", err)
	}
	if err := s.Insert(t.Context(), bigRecord("before")); err != nil {
		t.Fatal(err)
	}
	free := harness.FillDisk(t, disk)

	err := insertUntilFull(t, s, "full", 1000)
	if !errors.Is(err, engine.ErrFull) || !strings.Contains(err.Error(), "database or disk is full") {
		t.Fatalf("Insert on a full disk = %v, want engine.ErrFull saying database or disk is full", err)
	}
	// Probes, as readiness checks make them, while the disk stays full.
	for i := range 3 {
		if i > 0 {
			time.Sleep(store.ProbeInterval)
		}
		if err := s.Writable(t.Context()); !errors.Is(err, engine.ErrFull) {
			t.Fatalf("Writable on a full disk (probe %d) = %v, want engine.ErrFull", i+1, err)
		}
	}

	free()
	deadline := time.Now().Add(10 * store.ProbeInterval)
	for err := s.Writable(t.Context()); err != nil; err = s.Writable(t.Context()) {
		if time.Now().After(deadline) {
			t.Fatalf("Writable after space was freed: still %v", err)
		}
		time.Sleep(store.ProbeInterval / 10)
	}
	if err := s.Insert(t.Context(), bigRecord("after")); err != nil {
		t.Errorf("Insert after space was freed: %v", err)
	}
	r := mustGet(t, s, "before")
	r.Phase = engine.PhaseReady
	if err := s.Update(t.Context(), r); err != nil {
		t.Errorf("Update after space was freed: %v", err)
	}
}

func mustGet(t *testing.T, s *Store, id string) *engine.Record {
	t.Helper()
	r, err := s.Get(t.Context(), engine.KindBinding, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
