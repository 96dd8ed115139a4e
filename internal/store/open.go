package store

import (
	"errors"
	"fmt"
)

// ErrLost is returned (wrapped) by a store's Open that finds a database
// with no schema, no records, where something says that records were kept
// before: the database was lost or emptied (a failed restore or copy), and
// creating a new store in its place would forget every record while what
// they made stays in the storage backend.
var ErrLost = errors.New("the store is empty, but records were kept before")

// OpenOptions are what both stores' Open take besides the database.
type OpenOptions struct {
	// Earlier is asked when the database holds no schema yet, before Open
	// creates one: an error says what shows that records were kept before
	// (the data dir's state from an earlier start), and Open refuses with
	// it, wrapped in ErrLost, creating nothing. Nil asks nothing beyond the
	// store's own evidence (the SQLite store's marker).
	Earlier func() error
	// StartOver creates a new, empty store where the database holds no
	// schema, whatever says that records were kept before: starting over
	// on purpose.
	StartOver bool
	// ReadOnly opens the store for reading, beside a running broker
	// (the admin listings): nothing is created, migrated or marked, and
	// the store's connections refuse writes. A database without a schema,
	// or at a version other than this binary's, is refused.
	ReadOnly bool
}

// CheckSchema is what a read-only Open asks of the schema version it
// found: the one this binary writes, or an error saying what to do.
func CheckSchema(current, want int) error {
	switch {
	case current == 0:
		return errors.New("no bucketbroker store here (no schema): check --store and --data-dir")
	case current < want:
		return fmt.Errorf("the store's schema is at version %d, older than this binary's %d: run `bucketbroker admin migrate` (serve migrates on start) or use the bucketbroker that serves it", current, want)
	case current > want:
		return fmt.Errorf("the store's schema is at version %d, newer than this binary's %d: use the bucketbroker that serves it", current, want)
	}
	return nil
}

// CheckNew is what a store's Open asks before it creates the schema of a
// database that holds none: nil unless opts.StartOver is false and own
// (the store's own evidence; may be nil) or opts.Earlier says that
// records were kept before.
func CheckNew(opts OpenOptions, own func() error) error {
	if opts.StartOver {
		return nil
	}
	for _, said := range []func() error{own, opts.Earlier} {
		if said == nil {
			continue
		}
		if err := said(); err != nil {
			return fmt.Errorf("%w: %w", ErrLost, err)
		}
	}
	return nil
}
