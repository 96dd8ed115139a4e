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
// no write has succeeded since (see store.Writes). Then it probes: it
// rewrites the first row of schema_migrations with the values it holds,
// which PostgreSQL writes as a new row version (and WAL) like any update,
// and which changes nothing anyone reads.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.writes.Check(ctx, s.probe); err != nil {
		return fmt.Errorf("write to the store: %w", err)
	}
	return nil
}

func (s *Store) probe(ctx context.Context) error {
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := s.pool.Exec(call, `UPDATE schema_migrations SET applied_at = applied_at WHERE version = 1`)
	if err != nil {
		return s.writeFailed(callErr(ctx, err))
	}
	return nil
}
