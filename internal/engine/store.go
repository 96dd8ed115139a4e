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
)

// ListOptions selects records for List. Zero fields select everything.
type ListOptions struct {
	Kind Kind
	// InstanceID selects the bindings of one instance.
	InstanceID string
	// Unfinished selects records whose operation is in progress.
	Unfinished bool
}

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
	// List returns the records matching opts, ordered by kind and id.
	List(ctx context.Context, opts ListOptions) ([]*Record, error)
}
