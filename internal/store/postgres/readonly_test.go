package postgres

import (
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

func openReadOnly(t *testing.T, dsn string) (*Store, error) {
	t.Helper()
	s, err := OpenWith(t.Context(), dsn, store.OpenOptions{ReadOnly: true})
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
// Store on the database, opened read-only.
func TestReadOnly(t *testing.T) {
	dsn, _ := freshSchema(t)
	w := open(t, dsn)
	ro, err := openReadOnly(t, dsn)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunReadOnly(t, w, ro)
}

// TestReadOnlyRefuses: a read-only Open creates no schema where there is
// none, and reads no schema but its own version.
func TestReadOnlyRefuses(t *testing.T) {
	empty, emptySchema := freshSchema(t)
	older, olderSchema := freshSchema(t)
	open(t, older)
	admin(t, older, `DELETE FROM schema_migrations WHERE version = $1`, len(migrations))
	for name, tc := range map[string]struct {
		reason, dsn, want string
	}{
		"Empty": {"a schema without the tables is no store, and a reader must not create them", empty, "no bucketbroker store here"},
		"Older": {"an older schema is migrated by serve or admin migrate, not by a reader", older, "older than this binary's"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openReadOnly(t, tc.dsn)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nerr = %v, want one containing %q", tc.reason, err, tc.want)
			}
		})
	}
	if got := query(t, empty, `SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1`, emptySchema); len(got) != 0 {
		t.Errorf("a refused read-only Open created tables: %v", got)
	}
	if got := query(t, older, `SELECT version::text FROM schema_migrations`); len(got) != len(migrations)-1 {
		t.Errorf("a refused read-only Open migrated the older schema %s: versions %v", olderSchema, got)
	}
}
