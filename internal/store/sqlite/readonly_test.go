package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

// TestReadOnly is an admin listing beside a running broker: a second
// Store on the file, opened read-only.
func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	storetest.RunReadOnly(t, open(t, path), OpenWith, path)
}

// TestReadOnlyRefuses: a read-only Open creates nothing where there is no
// store, and reads no schema but its own version.
func TestReadOnlyRefuses(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", "bucketbroker.db")
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	older := filepath.Join(dir, "older.db")
	if err := open(t, older).Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", older)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE version = ?`, len(migrations)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.RunReadOnlyRefuses(t, OpenWith, map[string]storetest.Refusal{
		"Missing": {
			Reason: "no file: nothing to read, and none may be created",
			Where:  missing,
			Want:   "no bucketbroker store here",
		},
		"Empty": {
			Reason: "a file without a schema is no store",
			Where:  empty,
			Want:   "no bucketbroker store here",
		},
		"Older": {
			Reason: "an older schema is migrated by serve or admin migrate, not by a reader",
			Where:  older,
			Want:   "older than this binary's",
		},
	})
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("a refused read-only Open created the store's directory: stat: %v", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("a refused read-only Open wrote into an empty file: %v, %v", fi, err)
	}
	if _, err := os.Stat(markerPath(empty)); !os.IsNotExist(err) {
		t.Errorf("a refused read-only Open wrote the marker: stat: %v", err)
	}
}
