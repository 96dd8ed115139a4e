package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

func openReadOnly(t *testing.T, path string) (*Store, error) {
	t.Helper()
	s, err := OpenWith(t.Context(), path, store.OpenOptions{ReadOnly: true})
	if err == nil {
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	return s, err
}

// TestReadOnly is an admin listing beside a running broker: a second
// Store on the file, opened read-only.
func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	w := open(t, path)
	ro, err := openReadOnly(t, path)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunReadOnly(t, w, ro)
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
	for name, tc := range map[string]struct {
		reason, path, want string
	}{
		"Missing": {"no file: nothing to read, and none may be created", missing, "no bucketbroker store here"},
		"Empty":   {"a file without a schema is no store", empty, "no bucketbroker store here"},
		"Older":   {"an older schema is migrated by serve or admin migrate, not by a reader", older, "older than this binary's"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openReadOnly(t, tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nerr = %v, want one containing %q", tc.reason, err, tc.want)
			}
		})
	}
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
