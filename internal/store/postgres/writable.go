package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bucketbroker/bucketbroker/internal/store"
)

// diskFull is PostgreSQL's SQLSTATE disk_full: the server could not
// extend a file for the write.
const diskFull = "53100"

// insufficientPrivilege is PostgreSQL's SQLSTATE insufficient_privilege.
const insufficientPrivilege = "42501"

// writeFailed returns the error of a write, marked as engine.ErrFull when
// the server had no room for it, and notes it.
func (s *Store) writeFailed(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == diskFull {
		err = store.Full(err)
	}
	s.writes.Note(err)
	return err
}

// Writable returns nil unless the last write failed for want of space and
// no write has succeeded since (see store.Writes). Then it probes with a
// write that needs new space where the records live: a row in a temporary
// table of its own, made in the database's tablespace and dropped at the
// end of the probe's transaction, whose first page PostgreSQL allocates in
// a new file. A row rewritten in place proves nothing: it may fit in its
// page's free space on a disk that has none.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.writes.Check(ctx, s.probe); err != nil {
		return fmt.Errorf("write to the store: %w", err)
	}
	return nil
}

func (s *Store) probe(ctx context.Context) error {
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// Without arguments, pgx sends this as one simple query: both
	// statements run in one implicit transaction.
	_, err := s.pool.Exec(call, `CREATE TEMPORARY TABLE bucketbroker_probe (b bytea) ON COMMIT DROP;
INSERT INTO bucketbroker_probe VALUES ('\x00')`)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == insufficientPrivilege {
		// No TEMPORARY privilege on the database: a weaker probe, a row
		// rewritten in place, rather than none, so that readiness never
		// stays failed for want of a privilege. It may pass on a full
		// disk; the next failed write fails readiness again.
		_, err = s.pool.Exec(call, `UPDATE schema_migrations SET applied_at = applied_at WHERE version = 1`)
	}
	if err != nil {
		return s.writeFailed(callErr(ctx, err))
	}
	return nil
}
