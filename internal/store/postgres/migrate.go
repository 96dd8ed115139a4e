package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bucketbroker/bucketbroker/internal/store"
)

// migrateLockKey is the pg_advisory_xact_lock key that serializes schema
// migrations of every bucketbroker process on a database ("bbschema" in
// ASCII). Advisory locks are per database, not per schema, so stores in two
// schemas of one database also take turns; a migration is short.
const migrateLockKey int64 = 0x6262736368656d61

// migrations are the schema changes, in order: migrations[i] brings the
// schema to version i+1. Append only; never edit one that has shipped.
var migrations = []string{
	// 1: records. The columns beside data are copies of record fields that
	// queries select on; data is the whole record and the source of truth.
	// data is json, not jsonb: json keeps the text as written, and the
	// record's raw JSON fields (the canonical parameters that fingerprints
	// are computed over) must come back byte for byte; jsonb would reorder
	// keys and rewrite numbers. kind, id and instance_id sort by bytes
	// (COLLATE "C") whatever the database's default collation, so that
	// List's order is Go's string order and ORDER BY kind, id reads the
	// primary key in order. Unfinished operations are few among many
	// finished ones: a partial index holds only them.
	`CREATE TABLE records (
		kind        text COLLATE "C" NOT NULL,
		id          text COLLATE "C" NOT NULL,
		instance_id text COLLATE "C" NOT NULL,
		phase       text        NOT NULL,
		op_state    text        NOT NULL,
		version     bigint      NOT NULL,
		created_at  timestamptz NOT NULL,
		updated_at  timestamptz NOT NULL,
		data        json        NOT NULL,
		PRIMARY KEY (kind, id)
	);
	CREATE INDEX records_instance_id ON records (instance_id, kind, id);
	CREATE INDEX records_unfinished ON records (kind, id) WHERE op_state = 'in progress';`,
	// 2: resource_name, the record's resource's name (Record.ResourceName:
	// an instance's bucket, a binding's user; empty for upstream records),
	// COLLATE "C" as kind and id, for the listing by name
	// (ListOptions.ByName) that the audit merges with the backend's
	// listings; filled from data for the rows already there.
	`ALTER TABLE records ADD COLUMN resource_name text COLLATE "C" NOT NULL DEFAULT '';
	UPDATE records SET resource_name = COALESCE(CASE kind
		WHEN 'instance' THEN data->>'bucket'
		WHEN 'binding' THEN data->>'userName' END, '')
	WHERE kind IN ('instance', 'binding');
	CREATE INDEX records_resource_name ON records (kind, resource_name, id);`,
}

// migrate brings the schema up to the newest version in migrations, in one
// transaction: a crash or a failed migration leaves the schema as it was
// (PostgreSQL's DDL is transactional). The transaction first takes an
// advisory lock, so that replicas starting at the same time migrate one
// after the other; the later ones find nothing left to do. Without the lock
// two concurrent CREATE TABLE IF NOT EXISTS can both fail on a unique
// violation in the catalog. A database with no schema gets one only when
// isNew returns nil (see store.Migrate).
func migrate(ctx context.Context, pool *pgxpool.Pool, isNew func() error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit; a failed migration's error is the one returned

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
		return fmt.Errorf("migrate schema: take migration lock: %w", err)
	}
	var schema *string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	if schema == nil {
		var path string
		if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&path); err != nil {
			return fmt.Errorf("migrate schema: %w", err)
		}
		return fmt.Errorf("migrate schema: search_path %q names no existing schema to keep the tables in", path)
	}
	if _, err := tx.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL
		)`); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx,
		`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate schema: read version: %w", err)
	}
	if err := store.Migrate(current, migrations, isNew, func(v int, statements string) error {
		// No arguments: pgx sends it with the simple protocol, which runs
		// every statement of a multi-statement migration.
		if _, err := tx.Exec(ctx, statements); err != nil {
			return err
		}
		_, err := tx.Exec(ctx,
			`INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, store.Now())
		return err
	}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate schema: %w", err)
	}
	return nil
}

// checkEncoding refuses a database that cannot store every record: ids and
// parameters are arbitrary Unicode, and a LATIN1 database would accept the
// first records and fail on the first id it cannot encode.
func checkEncoding(ctx context.Context, pool *pgxpool.Pool) error {
	var enc string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_encoding')`).Scan(&enc); err != nil {
		return fmt.Errorf("read database encoding: %w", err)
	}
	if enc != "UTF8" {
		return fmt.Errorf("database encoding is %s, want UTF8: create the database with ENCODING 'UTF8'", enc)
	}
	return nil
}

// checkSchema refuses, for a read-only store, a database whose schema (in
// the search_path) is missing or at a version other than migrations'
// (store.CheckSchema).
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	var current int
	err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists)
	if err == nil && exists {
		err = pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current)
	}
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	return store.CheckSchema(current, len(migrations))
}
