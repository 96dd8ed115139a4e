package engine

import (
	"context"
	"errors"
)

// Store errors, returned (wrapped or not) by every Store implementation.
var (
	// ErrExists is returned by Insert when a record with the same kind and
	// id is already stored.
	ErrExists = errors.New("record already exists")
	// ErrNotFound is returned by Get when no record has that kind and id.
	ErrNotFound = errors.New("record not found")
	// ErrStale is returned by Update when the stored version is not the one
	// the caller read: someone else wrote in between.
	ErrStale = errors.New("record changed since it was read")
	// ErrFull is returned (wrapped) by Insert and Update when the write
	// failed for want of space (a full disk, or the database's own size
	// limit): it succeeds only once space is freed.
	ErrFull = errors.New("database or disk is full")
)

// ListOptions selects records for List. Zero fields select everything.
type ListOptions struct {
	Kind Kind
	// InstanceID selects the bindings of one instance.
	InstanceID string
	// Unfinished selects records whose operation is in progress.
	Unfinished bool
	// After and Limit page a listing: with After set, only records
	// after it in (kind, id) order are listed; with Limit above zero, at
	// most Limit records are, and fewer means the listing has reached its
	// end (records that cannot be read are skipped and do not count). The
	// next page starts after the last record of this one. Zero Limit lists
	// every match at once.
	After RecordKey
	Limit int
	// ByName lists the records of one Kind (required) in the order of
	// their resources' names (Record.ResourceName; empty for upstream
	// records, first), then id, in byte order: the order the storage
	// backends list buckets and users in. A page then starts after
	// After's Name and ID.
	ByName bool
}

// RecordKey names a record: its kind and id, and with them its
// resource's name, the cursor of a listing by name. The zero value is
// before every record.
type RecordKey struct {
	Kind Kind
	ID   string
	Name string
}

// KeyOf returns the key of r, the After of the page that follows r.
func KeyOf(r *Record) RecordKey { return RecordKey{Kind: r.Kind, ID: r.ID, Name: r.ResourceName()} }

// Store keeps records durably. A call returns only after its write is
// committed (synchronous commit): an answer sent after it survives a crash.
type Store interface {
	// Insert stores a new record atomically if no record of the same kind
	// and id exists, and returns ErrExists otherwise. It sets Version to 1.
	Insert(ctx context.Context, r *Record) error
	// Get returns the record of the given kind and id, or ErrNotFound.
	Get(ctx context.Context, kind Kind, id string) (*Record, error)
	// Update replaces the record if its stored Version still equals
	// r.Version, then increments r.Version. Otherwise it returns ErrStale and
	// changes nothing.
	Update(ctx context.Context, r *Record) error
	// List returns the records matching opts, ordered by kind and id
	// (byte order; by resource name and id with opts.ByName), a page of
	// them when opts.Limit is above zero. Each
	// page is read on its own: a listing paged through records written
	// meanwhile sees each record at most once, and every record that
	// existed throughout.
	List(ctx context.Context, opts ListOptions) ([]*Record, error)
}
