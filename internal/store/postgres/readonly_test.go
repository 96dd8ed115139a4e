package postgres

import (
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

// TestReadOnly is an admin listing beside a running broker: a second
// Store on the database, opened read-only.
func TestReadOnly(t *testing.T) {
	dsn, _ := freshSchema(t)
	storetest.RunReadOnly(t, open(t, dsn), OpenWith, dsn)
}

// TestReadOnlyRefuses: a read-only Open creates no schema where there is
// none, and reads no schema but its own version.
func TestReadOnlyRefuses(t *testing.T) {
	empty, emptySchema := freshSchema(t)
	older, olderSchema := freshSchema(t)
	open(t, older)
	admin(t, older, `DELETE FROM schema_migrations WHERE version = $1`, len(migrations))
	storetest.RunReadOnlyRefuses(t, OpenWith, map[string]storetest.Refusal{
		"Empty": {
			Reason: "a schema without the tables is no store, and a reader must not create them",
			Where:  empty,
			Want:   "no bucketbroker store here",
		},
		"Older": {
			Reason: "an older schema is migrated by serve or admin migrate, not by a reader",
			Where:  older,
			Want:   "older than this binary's",
		},
	})
	if got := query(t, empty, `SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1`, emptySchema); len(got) != 0 {
		t.Errorf("a refused read-only Open created tables: %v", got)
	}
	if got := query(t, older, `SELECT version::text FROM schema_migrations`); len(got) != len(migrations)-1 {
		t.Errorf("a refused read-only Open migrated the older schema %s: versions %v", olderSchema, got)
	}
}
