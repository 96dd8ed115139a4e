package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// rawDB opens the file with no Store in between, as a second process would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatalf("open raw database: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) engine.Store {
		return open(t, filepath.Join(t.TempDir(), "state", "bucketbroker.db"))
	})
}

func record(id string) *engine.Record {
	return &engine.Record{
		Kind:         engine.KindBinding,
		ID:           id,
		InstanceID:   "instance-1",
		Fingerprint:  "fp",
		Phase:        engine.PhaseProvisioning,
		Op:           engine.Operation{ID: "op-1", Type: engine.OpBind, State: engine.OpInProgress},
		SealedSecret: []byte{1, 2, 3},
	}
}

func TestReopenKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r := record("binding-1")
	if err := s.Insert(t.Context(), r); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	r.Phase = engine.PhaseReady
	r.Op.State = engine.OpSucceeded
	if err := s.Update(t.Context(), r); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Get(t.Context(), r.Kind, r.ID); err == nil {
		t.Errorf("Get after Close succeeded, want an error")
	}

	s = open(t, path)
	got, err := s.Get(t.Context(), r.Kind, r.ID)
	if err != nil {
		t.Fatalf("Get after re-Open: %v", err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("record after re-Open (-want +got):\n%s", diff)
	}
	if err := s.Insert(t.Context(), record("binding-1")); !errors.Is(err, engine.ErrExists) {
		t.Errorf("Insert after re-Open: got error %v, want ErrExists", err)
	}
}

func TestOpenPathWithURICharacters(t *testing.T) {
	// The path goes into a file: URI; characters that mean something there
	// must still name this file and not another one.
	path := filepath.Join(t.TempDir(), "a b?c=d#e%20f", "bucket&broker.db")
	s := open(t, path)
	if err := s.Insert(t.Context(), record("binding-1")); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	// createFile made an empty file there; SQLite must have written to it.
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("database not written at the given path: stat = %v, %v", fi, err)
	}
}

func TestOpenMigrates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	for i := range 2 {
		s, err := Open(t.Context(), path)
		if err != nil {
			t.Fatalf("Open #%d: %v", i+1, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}

	db := rawDB(t, path)
	var versions []int
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := make([]int, len(migrations))
	for i := range want {
		want[i] = i + 1
	}
	if diff := cmp.Diff(want, versions); diff != "" {
		t.Errorf("schema_migrations after two Opens (-want +got):\n%s", diff)
	}

	// Every statement of a multi-statement migration ran, not only the first.
	var indexes []string
	irows, err := db.QueryContext(t.Context(),
		`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatalf("read indexes: %v", err)
	}
	defer irows.Close()
	for irows.Next() {
		var name string
		if err := irows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	if diff := cmp.Diff([]string{"records_instance_id", "records_op_state", "records_resource_name"}, indexes); diff != "" {
		t.Errorf("indexes on records (-want +got):\n%s", diff)
	}
}

// TestMigrateFillsResourceName opens a file at schema version 1, as
// versions before the listing by name left it, and finds each record's
// resource name filled in by the migration: the listing by name has them
// in order, and a row whose data is not JSON migrates too (empty name)
// and stays unreadable.
func TestMigrateFillsResourceName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	db := rawDB(t, path)
	ctx := t.Context()
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT`,
		migrations[0],
		`INSERT INTO schema_migrations VALUES (1, 'then')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("schema 1: %v", err)
		}
	}
	// The records as versions at schema 1 wrote them: the bucket and the
	// user's name at the top level.
	rows := []struct{ kind, id, instanceID, data string }{
		{"instance", "i1", "", `{"kind":"instance","id":"i1","bucket":"bb-b","phase":"ready"}`},
		{"instance", "i2", "", `{"kind":"instance","id":"i2","bucket":"bb-a","phase":"ready"}`},
		{"instance", "i3", "", `{"kind":"instance","id":"i3","upstream":"db","phase":"ready"}`},
		{"binding", "b1", "i1", `{"kind":"binding","id":"b1","instanceId":"i1","bucket":"bb-b","userName":"bb-z","phase":"ready"}`},
		{"binding", "b2", "i2", `{"kind":"binding","id":"b2","instanceId":"i2","bucket":"bb-a","userName":"bb-y","phase":"ready"}`},
	}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, `INSERT INTO records VALUES (?, ?, ?, 'ready', 'succeeded', 1, 'then', 'then', ?)`,
			r.kind, r.id, r.instanceID, r.data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO records VALUES ('instance', 'bad', '', 'ready', 'succeeded', 1, 'then', 'then', '{"bucket":')`); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	for kind, want := range map[engine.Kind][]string{
		engine.KindInstance: {"instance/i3", "instance/i2", "instance/i1"},
		engine.KindBinding:  {"binding/b2", "binding/b1"},
	} {
		got, err := s.List(ctx, engine.ListOptions{Kind: kind, ByName: true, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range got {
			keys = append(keys, string(r.Kind)+"/"+r.ID)
		}
		if diff := cmp.Diff(want, keys); diff != "" {
			t.Errorf("%ss by name after the migration (-want +got):\n%s", kind, diff)
		}
	}
	var names []string
	qrows, err := db.QueryContext(ctx, `SELECT resource_name FROM records ORDER BY kind, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer qrows.Close()
	for qrows.Next() {
		var n string
		if err := qrows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if diff := cmp.Diff([]string{"bb-z", "bb-y", "", "bb-b", "bb-a", ""}, names); diff != "" {
		t.Errorf("resource_name of b1, b2, bad, i1, i2, i3 (-want +got):\n%s", diff)
	}
	if bad := s.Unreadable(); len(bad) != 1 || bad[0].ID != "bad" {
		t.Errorf("Unreadable() = %+v, want instance/bad", bad)
	}
}

func TestOpenRejectsNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s := open(t, path)
	if err := s.Insert(t.Context(), record("binding-1")); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	newer := len(migrations) + 1
	db := rawDB(t, path)
	if _, err := db.ExecContext(t.Context(),
		`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 'later')`, newer); err != nil {
		t.Fatalf("record a newer migration: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(t.Context(), path)
	if err == nil {
		_ = s2.Close()
		t.Fatalf("Open of a database at schema version %d succeeded, want an error", newer)
	}
	want := fmt.Sprintf("database schema version %d is newer than the newest this binary knows (%d)", newer, len(migrations))
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Open error = %q, want it to contain %q", err, want)
	}
}

func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	path := filepath.Join(dir, "bucketbroker.db")
	s := open(t, path)
	// A write creates the -wal file, which must not be wider than the database.
	if err := s.Insert(t.Context(), record("binding-1")); err != nil {
		t.Fatalf("Insert: %v", err)
	}

	for _, tc := range []struct {
		path string
		want os.FileMode
	}{
		{filepath.Dir(dir), 0o700 | os.ModeDir},
		{dir, 0o700 | os.ModeDir},
		{path, 0o600},
		{path + "-wal", 0o600},
		{path + "-shm", 0o600},
		{markerPath(path), 0o600},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Errorf("stat: %v", err)
			continue
		}
		if got := fi.Mode(); got != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "bucketbroker.db"))
	for name, db := range map[string]*sql.DB{"writer": s.writer, "reader": s.readers} {
		for _, tc := range []struct {
			pragma string
			want   string
		}{
			{"journal_mode", "wal"},
			{"synchronous", "2"}, // FULL
			{"busy_timeout", "10000"},
			{"foreign_keys", "1"},
		} {
			var got string
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
				t.Fatalf("%s: PRAGMA %s: %v", name, tc.pragma, err)
			}
			if got != tc.want {
				t.Errorf("%s: PRAGMA %s = %s, want %s", name, tc.pragma, got, tc.want)
			}
		}
	}
	if _, err := s.readers.ExecContext(t.Context(), `DELETE FROM records`); err == nil {
		t.Errorf("a write through the reader pool succeeded, want it refused (query_only)")
	}
}

func TestRejectsEmptyKey(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "bucketbroker.db"))
	for name, r := range map[string]*engine.Record{
		"NoKind": {ID: "x"},
		"NoID":   {Kind: engine.KindInstance},
	} {
		if err := s.Insert(t.Context(), r); err == nil || errors.Is(err, engine.ErrExists) {
			t.Errorf("%s: Insert: got error %v, want a validation error", name, err)
		}
		if err := s.Update(t.Context(), r); err == nil || errors.Is(err, engine.ErrNotFound) {
			t.Errorf("%s: Update: got error %v, want a validation error", name, err)
		}
	}
}

// TestLockWait holds SQLite's write lock from another connection, as another
// process would, and checks that a write waits for it (busy_timeout) rather
// than failing with "database is locked", and that the caller's context ends
// the wait.
func TestLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s := open(t, path)
	other := rawDB(t, path)

	lock := func(t *testing.T) *sql.Tx {
		t.Helper()
		tx, err := other.BeginTx(t.Context(), nil) // BEGIN IMMEDIATE
		if err != nil {
			t.Fatalf("take the write lock: %v", err)
		}
		return tx
	}

	t.Run("WaitsForLock", func(t *testing.T) {
		tx := lock(t)
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = tx.Commit()
		}()
		if err := s.Insert(t.Context(), record("after-wait")); err != nil {
			t.Fatalf("Insert while another connection held the lock briefly: %v", err)
		}
	})

	t.Run("ContextEndsWait", func(t *testing.T) {
		tx := lock(t)
		defer func() { _ = tx.Rollback() }() // only releases the lock
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := s.Insert(ctx, record("never"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Insert behind a held lock: got error %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > busyTimeout/2 {
			t.Errorf("Insert returned after %v, want soon after its 200ms deadline", d)
		}
	})
}

// TestTwoStoresOneFile is two processes sharing a database file: their
// writes contend for SQLite's file lock rather than for one connection, and
// busy_timeout must still turn that into waiting, never "database is locked".
func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	storetest.RunTwoStores(t, open(t, path), open(t, path))
}

func BenchmarkInsertGet(b *testing.B) {
	storetest.Bench(b, open(b, filepath.Join(b.TempDir(), "bucketbroker.db")))
}

// TestDecodedRecordsStayCurrent checks the shortcut past decoding: a Get
// after another Store on the same file (another process, say) wrote the
// record sees the new write, and changing a record a Get returned changes
// nothing that a later Get returns.
func TestDecodedRecordsStayCurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	a, b := open(t, path), open(t, path)
	ctx := t.Context()
	if err := a.Insert(ctx, record("b1")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := a.Get(ctx, engine.KindBinding, "b1") // decoded, then reused
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != int64(i+1) {
			t.Fatalf("round %d: Get = version %d, want %d", i, got.Version, i+1)
		}
		got.Phase, got.SealedSecret[0] = engine.PhaseFailed, 9 // the caller's copy
		again, err := a.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatal(err)
		}
		if again.Phase == engine.PhaseFailed || again.SealedSecret[0] == 9 {
			t.Fatalf("round %d: a change to one Get's record shows in the next: %+v", i, again)
		}
		// The other Store writes; a's next Get must see it.
		other, err := b.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatal(err)
		}
		other.Phase = engine.PhaseReady
		other.Op.Description = fmt.Sprintf("write %d", i+1)
		if err := b.Update(ctx, other); err != nil {
			t.Fatal(err)
		}
		seen, err := a.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatal(err)
		}
		if seen.Version != other.Version || seen.Op.Description != other.Op.Description || seen.Phase != engine.PhaseReady {
			t.Fatalf("round %d: after another store's write Get = v%d %q, want v%d %q",
				i, seen.Version, seen.Op.Description, other.Version, other.Op.Description)
		}
	}
}

func TestUnreadableRecords(t *testing.T) {
	storetest.RunUnreadable(t, func(t *testing.T) (store.RawStore, storetest.Planter) {
		path := filepath.Join(t.TempDir(), "bucketbroker.db")
		s := open(t, path)
		db := rawDB(t, path)
		return s, func(t *testing.T, raw store.Raw, state engine.OpState) {
			_, err := db.ExecContext(t.Context(), `INSERT INTO records (kind, id, instance_id, phase, op_state, version, created_at, updated_at, data)
				VALUES (?, ?, ?, 'provisioning', ?, ?, '2026-01-01T00:00:00.000000000Z', '2026-01-01T00:00:00.000000000Z', ?)`,
				raw.Kind, raw.ID, raw.InstanceID, state, raw.Version, string(raw.Data))
			if err != nil {
				t.Fatalf("plant record: %v", err)
			}
		}
	})
}
