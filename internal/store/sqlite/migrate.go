package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/store"
)

// migrations are the schema changes, in order: migrations[i] brings the
// schema to version i+1. Append only; never edit one that has shipped.
var migrations = []string{
	// 1: records. The columns beside data are copies of record fields that
	// queries select on; data is the whole record and the source of truth.
	// The indexes end in (kind, id) so that List's ORDER BY reads them in
	// order instead of sorting.
	`CREATE TABLE records (
		kind        TEXT    NOT NULL,
		id          TEXT    NOT NULL,
		instance_id TEXT    NOT NULL,
		phase       TEXT    NOT NULL,
		op_state    TEXT    NOT NULL,
		version     INTEGER NOT NULL,
		created_at  TEXT    NOT NULL,
		updated_at  TEXT    NOT NULL,
		data        TEXT    NOT NULL,
		PRIMARY KEY (kind, id)
	) STRICT;
	CREATE INDEX records_instance_id ON records (instance_id, kind, id);
	CREATE INDEX records_op_state ON records (op_state, kind, id);`,
	// 2: resource_name, the record's resource's name (Record.ResourceName:
	// an instance's bucket, a binding's user; empty for upstream records),
	// for the listing by name (ListOptions.ByName) that the audit merges
	// with the backend's listings; filled from data for the rows already
	// there (none for a row whose data is not JSON: such a record cannot
	// be read, and its repair writes the column).
	`ALTER TABLE records ADD COLUMN resource_name TEXT NOT NULL DEFAULT '';
	UPDATE records SET resource_name = COALESCE(CAST(CASE kind
		WHEN 'instance' THEN json_extract(data, '$.bucket')
		WHEN 'binding' THEN json_extract(data, '$.userName') END AS TEXT), '')
	WHERE json_valid(data);
	CREATE INDEX records_resource_name ON records (kind, resource_name, id);`,
}

// migrate brings the schema of db up to the newest version in migrations,
// in one transaction: a crash or a failed migration leaves the schema as it
// was. The transaction takes the write lock at BEGIN (the DSN sets
// _txlock=immediate), so a second process opening the same file waits for
// the first to finish migrating instead of racing it. A database with no
// schema gets one only when isNew returns nil (see store.Migrate).
func migrate(ctx context.Context, db *sql.DB, isNew func() error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit; a failed migration's error is the one returned

	if _, err := tx.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			applied_at TEXT NOT NULL
		) STRICT`); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate schema: read version: %w", err)
	}
	if err := store.Migrate(current, migrations, isNew, func(v int, statements string) error {
		if _, err := tx.ExecContext(ctx, statements); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
			v, formatTime(time.Now()))
		return err
	}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	return nil
}

// checkSchema refuses, for a read-only store, a database whose schema is
// missing or at a version other than migrations' (store.CheckSchema).
func checkSchema(ctx context.Context, db *sql.DB) error {
	var tables, current int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables)
	if err == nil && tables > 0 {
		err = db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current)
	}
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	return store.CheckSchema(current, len(migrations))
}
