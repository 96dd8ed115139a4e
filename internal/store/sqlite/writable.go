package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/bucketbroker/bucketbroker/internal/store"
)

// writeFailed returns the error of a write, marked as engine.ErrFull when
// SQLite found no room for it (SQLITE_FULL: the file system refused the
// file's growth, or the database reached max_page_count), and notes it.
func (s *Store) writeFailed(err error) error {
	var se *msqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		err = store.Full(err)
	}
	s.writes.Note(err)
	return err
}

// Writable returns nil unless the last write failed for want of space and
// no write has succeeded since (see store.Writes). Then it probes with real
// writes that touch no record. A full disk stops SQLite's writes where the
// write-ahead log has to grow, and a small write may still fit in the log
// as it is, so the probe first checkpoints the log into the database file
// (which grows by the pages it has not held) and truncates it, then writes
// the header's user_version (which SQLite leaves to applications and this
// store uses for nothing else) into a new log, which needs new space. It
// fails while either has none.
func (s *Store) Writable(ctx context.Context) error {
	if err := s.writes.Check(ctx, s.probe); err != nil {
		return fmt.Errorf("write to the store: %w", err)
	}
	return nil
}

func (s *Store) probe(ctx context.Context) error {
	// busy: readers kept the log from being truncated; the write below
	// then tells on its own.
	var busy, logged, copied int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &copied); err != nil {
		return s.writeFailed(err)
	}
	// A value that differs from the one there: SQLite writes nothing for
	// a header field set to what it holds.
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", time.Now().UnixMilli()&0x7fffffff)); err != nil {
		return s.writeFailed(err)
	}
	return nil
}
