package store

import (
	"errors"
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
// does not expect. So is creating a schema (current 0) when isNew (see
// CheckNew) returns an error.
func Migrate(current int, migrations []string, isNew func() error, apply func(version int, statements string) error) error {
	if current > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than the newest this binary knows (%d): run a newer bucketbroker, or restore a backup taken before the upgrade",
			current, len(migrations))
	}
	if current == 0 && isNew != nil {
		if err := isNew(); err != nil {
			return err
		}
	}
	for v := current + 1; v <= len(migrations); v++ {
		if err := apply(v, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v, err)
		}
	}
	return nil
}

// Paged carries out a paged listing (opts.After, opts.Limit) through page,
// which appends to out the records of the rows after after that decode (at
// most want rows; all for 0) and returns how many rows it read and the
// last one's key, or none when no row can follow after. Rows that cannot
// be decoded do not count toward the limit: it reads on past them until
// Limit records have decoded or the rows run out, so that a short page
// means the end.
func Paged(opts engine.ListOptions, page func(after engine.RecordKey, want int, out *[]*engine.Record) (rows int, last engine.RecordKey, none bool, err error)) ([]*engine.Record, error) {
	if opts.Limit < 0 {
		return nil, fmt.Errorf("list records: limit %d is negative", opts.Limit)
	}
	if opts.ByName && opts.Kind == "" {
		return nil, errors.New("list records: a listing by resource name needs a kind")
	}
	var out []*engine.Record
	after := opts.After
	for {
		want := opts.Limit - len(out)
		n, last, none, err := page(after, want, &out)
		if err != nil {
			return nil, fmt.Errorf("list records: %w", err)
		}
		if none || opts.Limit == 0 || n < want || len(out) >= opts.Limit {
			return out, nil
		}
		after = last
	}
}
