package store

import (
	"fmt"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// ForInsert returns the copy of r an insert writes and its JSON: version 1,
// CreatedAt kept if r has one and now otherwise, UpdatedAt now. r itself is
// unchanged; the store copies the new version and times back into r once
// the row is written. Both stores' Insert start with it, so that they stamp
// a record the same way.
func ForInsert(r *engine.Record) (*engine.Record, []byte, error) {
	if err := CheckKey(r.Kind, r.ID); err != nil {
		return nil, nil, err
	}
	now := Now()
	c := r.Clone()
	c.Version = 1
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.UpdatedAt = now
	data, err := Encode(c)
	if err != nil {
		return nil, nil, err
	}
	return c, data, nil
}

// ForUpdate returns the copy of r a compare-and-swap update writes and its
// JSON: version one above r's (r.Version is the one the update expects to
// replace), UpdatedAt now. r itself is unchanged.
func ForUpdate(r *engine.Record) (*engine.Record, []byte, error) {
	if err := CheckKey(r.Kind, r.ID); err != nil {
		return nil, nil, err
	}
	c := r.Clone()
	c.Version = r.Version + 1
	c.UpdatedAt = Now()
	data, err := Encode(c)
	if err != nil {
		return nil, nil, err
	}
	return c, data, nil
}

// Migrate brings a schema at version current up to len(migrations): it
// calls apply for each version above current, in order, with that
// version's statements; apply runs them and records the version, inside
// the caller's transaction. A schema newer than the binary is refused
// before anything runs: a downgrade would write records the newer schema
// does not expect.
func Migrate(current int, migrations []string, apply func(version int, statements string) error) error {
	if current > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than the newest this binary knows (%d): run a newer bucketbroker, or restore a backup taken before the upgrade",
			current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		if err := apply(v, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v, err)
		}
	}
	return nil
}
