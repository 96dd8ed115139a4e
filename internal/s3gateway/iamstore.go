package s3gateway

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/versity/versitygw/iamapi/iamerr"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

// usersDB is the SQLite database of the IAM users, in the IAM directory.
const usersDB = "users.db"

// userStore is the IAM API's storage: the users in a SQLite database
// (usersDB), versitygw's own file store (storage.InternalStore) for the
// rest (roles, OIDC providers, sessions).
//
// versitygw keeps every user, key and policy in one JSON file that each
// call reads and parses in full and each change rewrites in full, so a
// call costs time in proportion to the number of users (135 ms a driver
// call at 300 users against 6 ms with a few: BenchmarkProvision). Here a
// user is a row: the columns the lookups need, its id, its name as
// stored (the listing order) and case-folded (IAM compares names so), and
// its path, and the rest of the user as versitygw's types.User encodes to
// JSON (its keys and inline policies included; about 1.2 KB for a user
// the s3iam driver makes: encodeUser); its access key ids are rows of
// their own that point to it. A call reads or changes its user's row
// through an index; a ListUsers page is a range of the index of names;
// nothing is kept in memory per user and a start reads no user
// (TestStartReadsNoUser): its cost does not grow with the users.
//
// What a user's row decides (limits, tags, policies, keys, errors) is
// versitygw's store's logic for one user (iamuser.go). What spans users
// is decided here, in the change's transaction: a name (case-folded), a
// user id and an access key id are unique.
//
// Durability. WAL, synchronous=NORMAL: a change is committed to the
// write-ahead log, which the operating system has, without an fsync; a
// checkpoint fsyncs. A kill -9 at any instant therefore loses no
// committed change and never leaves a change in part (SQLite's
// transactions: TestUserStoreKillMidWrite); a crash of the machine can
// lose the last changes, not corrupt the database: a change costs a
// write, not an fsync, and a binding is three or four IAM changes. The
// broker's own record of the binding is fsynced by its store
// (synchronous=FULL); a binding whose user or key a crash of the machine
// lost is what `bucketbroker admin audit` reports as missing.
type userStore struct {
	storage.Storer // root: roles, OIDC providers, sessions

	dir string // the IAM directory
	// writer has one connection: every change in this process is queued
	// by database/sql, in a transaction that takes SQLite's write lock at
	// BEGIN; readers serve reads beside it (WAL).
	writer, readers *sql.DB
}

var _ storage.Storer = (*userStore)(nil)

// schema is the users database, at schemaVersion (PRAGMA user_version).
// access_keys.user is users.rid: a rowid declared INTEGER PRIMARY KEY
// does not change.
const (
	schemaVersion = 1
	schema        = `
CREATE TABLE users (
	rid    INTEGER PRIMARY KEY,
	id     TEXT NOT NULL UNIQUE,
	name   TEXT NOT NULL,
	folded TEXT NOT NULL UNIQUE,
	path   TEXT NOT NULL,
	data   BLOB NOT NULL
);
CREATE INDEX users_by_name ON users (name);
CREATE TABLE access_keys (
	id   TEXT PRIMARY KEY,
	user INTEGER NOT NULL
) WITHOUT ROWID;
PRAGMA user_version = 1;`
)

// userReads counts the users decoded from the database in this process,
// for the tests: a start decodes none, a ListUsers page its own users.
var userReads atomic.Int64

// newUserStore opens the IAM directory dir: root's file store, and the
// users database, created if missing. A directory that holds users
// anywhere else (unusedUsers) is refused: opening it would serve none of
// them.
func newUserStore(ctx context.Context, dir string) (*userStore, error) {
	if unwritten, err := unwrittenStore(dir); err != nil {
		return nil, fmt.Errorf("open IAM store: %w", err)
	} else if unwritten {
		// Only the first start on a fresh data dir writes root's file
		// this way: nothing was stored in it yet.
		if err := os.Remove(filepath.Join(dir, storeFile)); err != nil {
			return nil, fmt.Errorf("open IAM store: %w", err)
		}
	}
	if err := unusedUsers(dir); err != nil {
		return nil, fmt.Errorf("open IAM store %s: %w", dir, err)
	}
	s := &userStore{dir: dir}
	if err := s.openDB(ctx); err != nil {
		return nil, fmt.Errorf("open IAM store %s: %w", filepath.Join(dir, usersDB), err)
	}
	root, err := storage.NewInternal(dir)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open IAM store %s: %w", dir, err)
	}
	s.Storer = root
	return s, nil
}

// Where users are found outside the users database: a users folder (a
// folder or a file per user), the index of those files, and users in
// root's file (versitygw's own store, storeFile). This store never writes
// any of them: root's file keeps roles, OIDC providers and sessions only.
const (
	usersDir     = "users"
	oldIndexFile = "index"
)

// unusedUsers returns an error when the IAM directory dir holds users
// outside the users database, which this store does not read. It looks
// at two names and reads root's file, which holds no users here.
func unusedUsers(dir string) error {
	var found []string
	for _, name := range []string{usersDir, oldIndexFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			found = append(found, name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, storeFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case len(b) > 0:
		// The layout of versitygw's file (storage.InternalStore's
		// iamConfig): users by name.
		var conf struct {
			Users map[string]json.RawMessage `json:"users"`
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			return fmt.Errorf("read %s: %w", filepath.Join(dir, storeFile), err)
		}
		if len(conf.Users) > 0 {
			found = append(found, fmt.Sprintf("%s: %d user(s)", storeFile, len(conf.Users)))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("IAM users are stored outside %s (%s), where this bucketbroker does not read them: "+
			"refusing to start without them; nothing was changed", usersDB, strings.Join(found, ", "))
	}
	return nil
}

// openDB opens the users database, its file 0600 (SQLite's -wal and -shm
// files take the database file's mode), and brings its schema to
// schemaVersion.
func (s *userStore) openDB(ctx context.Context) error {
	path := filepath.Join(s.dir, usersDB)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if s.writer, err = sql.Open("sqlite", usersDSN(path, false)); err != nil {
		return err
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetConnMaxIdleTime(0)
	// The page size first: it is fixed by the first write, and by WAL
	// mode. A user's row is about 1.3 KB: a 4 KiB page holds two (2 KB of
	// disk a user), an 8 KiB page five or six.
	var mode string
	if _, err := s.writer.ExecContext(ctx, `PRAGMA page_size = 8192`); err != nil {
		_ = s.writer.Close()
		return fmt.Errorf("set page size: %w", err)
	}
	if err := s.writer.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil || mode != "wal" {
		_ = s.writer.Close()
		return fmt.Errorf("set WAL mode: %q, %w", mode, err)
	}
	var version int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		_ = s.writer.Close()
		return fmt.Errorf("read schema version: %w", err)
	}
	switch version {
	case schemaVersion:
	case 0:
		if err := s.inTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, schema)
			return err
		}); err != nil {
			_ = s.writer.Close()
			return fmt.Errorf("create schema: %w", err)
		}
	default:
		_ = s.writer.Close()
		return fmt.Errorf("schema version %d: written by a newer bucketbroker (this one knows %d)", version, schemaVersion)
	}
	if s.readers, err = sql.Open("sqlite", usersDSN(path, true)); err != nil {
		_ = s.writer.Close()
		return err
	}
	// Kept open: a connection opened anew costs more than a read.
	n := max(4, runtime.GOMAXPROCS(0))
	s.readers.SetMaxOpenConns(n)
	s.readers.SetMaxIdleConns(n)
	return nil
}

// usersDSN is the data source name of the users database:
// synchronous=NORMAL (see userStore), transactions that take the write
// lock at BEGIN (a read-then-write transaction could otherwise fail with
// SQLITE_BUSY), read-only connections for the readers. WAL mode is set by
// openDB, after the page size.
func usersDSN(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_synchronous", "NORMAL")
	if readOnly {
		q.Set("_query_only", "on")
	} else {
		q.Set("_txlock", "immediate")
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}).String()
}

// Close closes the users database (its last connection checkpoints the
// log into the database file). Calls after Close fail.
func (s *userStore) Close() error {
	var errs []error
	if s.readers != nil {
		errs = append(errs, s.readers.Close())
	}
	return errors.Join(append(errs, s.writer.Close())...)
}

// inTx runs f in a write transaction, committed when f returns nil.
func (s *userStore) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin IAM change: %w", err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit IAM change: %w", err)
	}
	return nil
}

// querier is what a read needs: the readers, or a write transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const (
	byNameSQL = `SELECT rid, id, name, path, data FROM users WHERE folded = ?`
	byKeySQL  = `SELECT u.rid, u.id, u.name, u.path, u.data FROM access_keys k JOIN users u ON u.rid = k.user WHERE k.id = ?`
)

// lookup reads the user named name (case-insensitively), or IAM's
// NoSuchEntity.
func lookup(ctx context.Context, q querier, name string) (int64, types.User, error) {
	rid, u, err := readUser(q.QueryRowContext(ctx, byNameSQL, strings.ToLower(name)))
	if errors.Is(err, sql.ErrNoRows) {
		err = iamerr.NoSuchEntityUser(name)
	}
	return rid, u, err
}

// lookupKey reads the user that holds the access key id, and the key's
// place in its keys, or IAM's NoSuchEntity.
func lookupKey(ctx context.Context, q querier, id string) (int64, types.User, int, error) {
	rid, u, err := readUser(q.QueryRowContext(ctx, byKeySQL, id))
	i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == id })
	if errors.Is(err, sql.ErrNoRows) || (err == nil && i < 0) {
		err = iamerr.NoSuchEntityAccessKey(id)
	}
	return rid, u, i, err
}

// readUser scans rid, id, name, path, data.
func readUser(row *sql.Row) (int64, types.User, error) {
	var (
		rid            int64
		id, name, path string
		data           []byte
		u              types.User
	)
	if err := row.Scan(&rid, &id, &name, &path, &data); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, u, err
		}
		return 0, u, fmt.Errorf("read IAM user: %w", err)
	}
	u, err := decodeUser(id, name, path, data)
	return rid, u, err
}

// encodeUser is a user's data column: the user as types.User encodes to
// JSON, less what its columns hold (name, id, path).
func encodeUser(u types.User) ([]byte, error) {
	u.UserName, u.UserID, u.Path = "", "", ""
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("encode IAM user: %w", err)
	}
	return b, nil
}

// decodeUser is encodeUser's inverse.
func decodeUser(id, name, path string, data []byte) (types.User, error) {
	userReads.Add(1)
	var u types.User
	if err := json.Unmarshal(data, &u); err != nil {
		return u, fmt.Errorf("read IAM user %q: %w", name, err)
	}
	u.UserID, u.UserName, u.Path = id, name, path
	return u, nil
}

// update applies change to the user named name and stores it, in one
// transaction.
func (s *userStore) update(ctx context.Context, name string, change func(*types.User) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		rid, u, err := lookup(ctx, tx, name)
		if err != nil {
			return err
		}
		before := keyIDs(u)
		if err := change(&u); err != nil {
			return err
		}
		return storeUser(ctx, tx, rid, before, u)
	})
}

// updateKey is update for the user that holds the access key id; change
// gets the key's place in the user's keys.
func (s *userStore) updateKey(ctx context.Context, id string, change func(*types.User, int) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		rid, u, i, err := lookupKey(ctx, tx, id)
		if err != nil {
			return err
		}
		before := keyIDs(u)
		if err := change(&u, i); err != nil {
			return err
		}
		return storeUser(ctx, tx, rid, before, u)
	})
}

func keyIDs(u types.User) []string {
	ids := make([]string, 0, len(u.AccessKeys))
	for _, k := range u.AccessKeys {
		ids = append(ids, k.AccessKeyId)
	}
	return ids
}

// storeUser writes u over row rid, whose keys were before: a new name
// must be free, a new key id unused.
func storeUser(ctx context.Context, tx *sql.Tx, rid int64, before []string, u types.User) error {
	var other int64
	switch err := tx.QueryRowContext(ctx, `SELECT rid FROM users WHERE folded = ? AND rid <> ?`, strings.ToLower(u.UserName), rid).Scan(&other); {
	case err == nil:
		return iamerr.EntityAlreadyExistsUser(u.UserName)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("write IAM user %q: %w", u.UserName, err)
	}
	data, err := encodeUser(u)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET name = ?, folded = ?, path = ?, data = ? WHERE rid = ?`,
		u.UserName, strings.ToLower(u.UserName), u.Path, data, rid); err != nil {
		return fmt.Errorf("write IAM user %q: %w", u.UserName, err)
	}
	after := keyIDs(u)
	for _, id := range before {
		if !slices.Contains(after, id) {
			if _, err := tx.ExecContext(ctx, `DELETE FROM access_keys WHERE id = ?`, id); err != nil {
				return fmt.Errorf("write IAM user %q: %w", u.UserName, err)
			}
		}
	}
	for _, id := range after {
		if !slices.Contains(before, id) {
			if err := insertKey(ctx, tx, rid, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// insertKey records that row rid holds the access key id, or returns
// storage.ErrAccessKeyIDAlreadyExists.
func insertKey(ctx context.Context, tx *sql.Tx, rid int64, id string) error {
	taken, err := keyTaken(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("write access key %s: %w", id, err)
	}
	if taken {
		return storage.ErrAccessKeyIDAlreadyExists
	}
	if _, err := tx.ExecContext(ctx, addKeySQL, id, rid); err != nil {
		return fmt.Errorf("write access key %s: %w", id, err)
	}
	return nil
}

func keyTaken(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	var taken bool
	err := tx.QueryRowContext(ctx, keyTakenSQL, id).Scan(&taken)
	return taken, err
}

// Statements of the store's calls.
const (
	addUserSQL   = `INSERT INTO users (id, name, folded, path, data) VALUES (?, ?, ?, ?, ?)`
	addKeySQL    = `INSERT INTO access_keys (id, user) VALUES (?, ?)`
	nameTakenSQL = `SELECT EXISTS (SELECT 1 FROM users WHERE folded = ?)`
	keyTakenSQL  = `SELECT EXISTS (SELECT 1 FROM access_keys WHERE id = ?)`
)

// addRow inserts u's row, its other fields encoded as data, and returns
// the row's rid.
func addRow(ctx context.Context, tx *sql.Tx, u types.User, data []byte) (int64, error) {
	res, err := tx.ExecContext(ctx, addUserSQL, u.UserID, u.UserName, strings.ToLower(u.UserName), u.Path, data)
	if err != nil {
		return 0, fmt.Errorf("create IAM user %q: %w", u.UserName, err)
	}
	rid, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("create IAM user %q: %w", u.UserName, err)
	}
	return rid, nil
}

// CreateUser inserts the user: its name (case-insensitively), its id and
// its keys' ids must be free.
func (s *userStore) CreateUser(ctx context.Context, user types.User) (*types.User, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var taken bool
		if err := tx.QueryRowContext(ctx, nameTakenSQL, strings.ToLower(user.UserName)).Scan(&taken); err != nil {
			return fmt.Errorf("create IAM user %q: %w", user.UserName, err)
		} else if taken {
			return iamerr.EntityAlreadyExistsUser(user.UserName)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM users WHERE id = ?`, user.UserID).Scan(&n); err != nil {
			return fmt.Errorf("create IAM user %q: %w", user.UserName, err)
		} else if n > 0 {
			return storage.ErrUserIDAlreadyExists
		}
		return insertUser(ctx, tx, user)
	})
	if err != nil {
		return nil, err
	}
	return cloneUser(user), nil
}

// insertUser adds u's row (its name and id checked free) and its keys.
func insertUser(ctx context.Context, tx *sql.Tx, u types.User) error {
	data, err := encodeUser(u)
	if err != nil {
		return err
	}
	rid, err := addRow(ctx, tx, u, data)
	if err != nil {
		return err
	}
	for _, k := range u.AccessKeys {
		if err := insertKey(ctx, tx, rid, k.AccessKeyId); err != nil {
			return err
		}
	}
	return nil
}

// DeleteUser deletes the user; refused while it has keys or policies, as
// IAM does.
func (s *userStore) DeleteUser(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		rid, u, err := lookup(ctx, tx, name)
		if err != nil {
			return err
		}
		if len(u.Policies.Inline) > 0 {
			return iamerr.GetAPIError(iamerr.ErrDeleteConflictPolicies)
		}
		if len(u.AccessKeys) > 0 {
			return iamerr.GetAPIError(iamerr.ErrDeleteConflict)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM users WHERE rid = ?`, rid); err != nil {
			return fmt.Errorf("delete IAM user %q: %w", u.UserName, err)
		}
		return nil
	})
}

// UpdateUser changes the path, name or ARN; a new name must be free (a
// name is unique across users, case-insensitively).
func (s *userStore) UpdateUser(ctx context.Context, input storage.UpdateUserInput) (*types.User, error) {
	var updated types.User
	err := s.update(ctx, input.UserName, func(u *types.User) error {
		if input.NewPath != "" {
			u.Path = input.NewPath
		}
		if input.NewUserName != "" {
			u.UserName = input.NewUserName
		}
		if input.NewArn != "" {
			u.Arn = input.NewArn
		}
		updated = *u
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cloneUser(updated), nil
}

// ListUsers lists the users whose path starts with the prefix in name
// order (the stored names' bytes, as versitygw's store sorts them; the
// audit's merge of the users with the broker's records relies on it),
// paged as versitygw's store pages them, from the index of names: only
// the page's users are decoded, in one read transaction.
//
// The page starts after the marker's place in the order, not after the
// marker itself: a user deleted between two pages (the audit and the
// driver's inventory page while unbinds run) does not end the listing.
func (s *userStore) ListUsers(ctx context.Context, input storage.ListUsersInput) (*storage.ListUsersOutput, error) {
	limit := math.MaxInt
	if input.MaxItems > 0 {
		limit = int(input.MaxItems)
	}
	rows, err := s.readers.QueryContext(ctx, `SELECT id, name, path, data FROM users WHERE name > ? ORDER BY name`, input.Marker)
	if err != nil {
		return nil, fmt.Errorf("list IAM users: %w", err)
	}
	defer rows.Close()
	out := &storage.ListUsersOutput{Users: []types.User{}}
	for rows.Next() {
		var (
			id, name, path string
			data           sql.RawBytes
		)
		if err := rows.Scan(&id, &name, &path, &data); err != nil {
			return nil, fmt.Errorf("list IAM users: %w", err)
		}
		if !strings.HasPrefix(path, input.PathPrefix) {
			continue
		}
		if len(out.Users) == limit {
			out.IsTruncated, out.Marker = true, out.Users[limit-1].UserName
			break
		}
		u, err := decodeUser(id, name, path, data)
		if err != nil {
			return nil, fmt.Errorf("list IAM users: %w", err)
		}
		out.Users = append(out.Users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list IAM users: %w", err)
	}
	return out, nil
}

// iamCode is the code of an IAM API error, empty for any other.
func iamCode(err error) string {
	var apiErr iamerr.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return ""
}

func (s *userStore) GetUser(ctx context.Context, name string) (*types.User, error) {
	_, u, err := lookup(ctx, s.readers, name)
	if err != nil {
		return nil, err
	}
	return cloneUser(u), nil
}

func (s *userStore) GetUserByAccessKeyID(ctx context.Context, id string) (*types.User, error) {
	_, u, _, err := lookupKey(ctx, s.readers, id)
	if err != nil {
		return nil, err
	}
	return cloneUser(u), nil
}

func cloneUser(u types.User) *types.User {
	u.Tags = slices.Clone(u.Tags)
	u.AccessKeys = slices.Clone(u.AccessKeys)
	u.Policies.Inline = slices.Clone(u.Policies.Inline)
	return &u
}

// storeFile is the file of versitygw's file store (storage.InternalStore)
// in its directory.
const storeFile = "iam.json"

// backupFile is where the file store copies its file before each change.
const backupFile = storeFile + ".backup"

// unwrittenStore reports whether root's file store in dir has an empty
// file that never held anything, and removes the temporary files a killed
// write left.
//
// The file store writes every change to a temporary file renamed over the
// old one, after copying the old one to a backup the same way, so under a
// kill -9 a change is whole or absent; but the very first write, of the
// empty default when the file is missing, is a plain create-then-write,
// and a process killed between the two leaves an empty file that the
// store then refuses to parse ("unexpected end of JSON input") at every
// start after. Such a file has no backup yet: it never held anything, and
// is written anew. An empty file WITH a backup is another matter: nothing
// but a crash of the machine (the store does not fsync) truncates a file
// that was renamed into place, and it held roles, OIDC providers or
// sessions; the store refuses to start rather than drop them.
//
// A temporary file ("iam.json" and digits) left by a write that was
// killed before its rename holds a whole copy of the store and is never
// read again: it is removed.
func unwrittenStore(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, storeFile) && n != storeFile && n != backupFile && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return false, fmt.Errorf("remove a killed write's temporary file: %w", err)
			}
		}
	}
	fi, err := os.Stat(filepath.Join(dir, storeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Size() > 0 {
		return false, nil
	}
	backup, err := os.Stat(filepath.Join(dir, backupFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case backup.Size() > 0:
		return false, fmt.Errorf("%s is empty but was written before (its backup %s is not): "+
			"lost in a crash of the machine? Nothing was removed; restore it by hand "+
			"(the backup holds the state before the last change)", filepath.Join(dir, storeFile), backupFile)
	}
	return true, nil
}
