package s3gateway

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/versity/versitygw/iamapi/types"
)

// The layouts before the users database, each migrated by the first start
// that finds it (migrateUsers):
//
//   - users in root's file, iam.json in the IAM directory (versitygw's
//     own store, before users were stored apart);
//   - users/u<hex of the user id>/, versitygw's store (iam.json and its
//     backup) holding one user, a folder per user;
//   - users/u<hex of the user id>.json, a file per user: a line of what
//     the start indexed (names, path, key ids), then the user as
//     types.User encodes; or the user alone; and iam/index, the index of
//     those files that a clean stop left.
const (
	usersDir       = "users"
	userFileSuffix = ".json"
	// tmpSuffix ends the name of a file a write fills before it renames
	// it into place (a user's file then, the clean-stop marker now).
	tmpSuffix = ".tmp"
	// oldIndexFile is the index of the users' files a clean stop left.
	oldIndexFile = "index"
)

// migrateBatch is how many older users the migration holds in memory at
// once.
const migrateBatch = 5000

// killMigration, set by tests, simulates a kill -9 of the migration at a
// step: when it returns true there, migrateUsers returns errKilled and
// leaves everything as it is.
var killMigration func(step string) bool

// errKilled is what a migration stopped by killMigration returns.
var errKilled = errors.New("killed (simulated)")

func killedAt(step string) bool { return killMigration != nil && killMigration(step) }

// migrateUsers moves the users of the older layouts into the database and
// then removes them from where they were; it returns how many it moved.
//
// The users are inserted in one transaction, or updated where a row of the
// same user id is there already (a migration killed after its commit and
// before the older files were all removed: nothing changed them since, as
// the migration runs before the store serves). After the commit a
// checkpoint copies the log into the database file and fsyncs both, and
// the folder is fsynced: only then are the older users removed (root's
// file rewritten without them, durably; the users folder and the index
// removed, the folder fsynced). A kill at any step leaves the older users
// where they were, and the next start moves them again (TestMigrateKilled).
func (s *userStore) migrateUsers(ctx context.Context) (int, error) {
	folder := filepath.Join(s.dir, usersDir)
	rootUsers, err := readOldStore(s.dir)
	if err != nil {
		return 0, fmt.Errorf("read the users of %s: %w", filepath.Join(s.dir, storeFile), err)
	}
	entries, err := os.ReadDir(folder)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	oldIndex := filepath.Join(s.dir, oldIndexFile)
	_, indexErr := os.Lstat(oldIndex)
	if len(rootUsers) == 0 && entries == nil && errors.Is(indexErr, fs.ErrNotExist) && !dirExists(folder) {
		return 0, nil
	}
	var sources []string // a user file or folder each
	for _, e := range entries {
		if name := e.Name(); e.IsDir() || strings.HasSuffix(name, userFileSuffix) {
			sources = append(sources, filepath.Join(folder, name))
		}
	}
	n, err := s.moveAll(ctx, rootUsers, sources)
	if err != nil {
		return 0, err
	}
	if err := s.checkpoint(ctx); err != nil {
		return 0, err
	}
	if killedAt("durable") {
		return 0, errKilled
	}
	if len(rootUsers) > 0 {
		if err := dropRootUsers(s.dir); err != nil {
			return 0, err
		}
	}
	if err := removeOlderUsers(folder, oldIndex); err != nil {
		return 0, err
	}
	return n, nil
}

// moveAll writes root's older users and those of each older user file
// or folder into the database, in one transaction, reading the files a
// batch at a time; it returns how many it moved.
func (s *userStore) moveAll(ctx context.Context, rootUsers []types.User, sources []string) (int, error) {
	seen := newSeenUsers()
	n := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.moveUsers(ctx, tx, seen, filepath.Join(s.dir, storeFile), rootUsers); err != nil {
			return err
		}
		n += len(rootUsers)
		for start := 0; start < len(sources); start += migrateBatch {
			batch := sources[start:min(start+migrateBatch, len(sources))]
			read, err := readOlderUsers(batch)
			if err != nil {
				return err
			}
			for i, users := range read {
				if err := s.moveUsers(ctx, tx, seen, batch[i], users); err != nil {
					return err
				}
				n += len(users)
			}
		}
		if killedAt("commit") {
			return errKilled
		}
		return nil
	})
	return n, err
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// checkpoint copies the log into the database file, fsyncing both, and
// fsyncs the IAM directory (the database file's entry, on a first start):
// what was committed is durable.
func (s *userStore) checkpoint(ctx context.Context) error {
	var busy, logged, moved int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &moved); err != nil {
		return fmt.Errorf("checkpoint the users database: %w", err)
	}
	if busy != 0 {
		return errors.New("checkpoint the users database: busy (another process has it open?)")
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("sync %s: %w", s.dir, err)
	}
	return nil
}

// seenUsers is what the migration has moved: a name (case-folded), a user
// id or an access key id found twice among the older users is an error
// (each is unique), as it was for the store before.
type seenUsers struct{ names, ids, keys map[string]string }

func newSeenUsers() seenUsers {
	return seenUsers{names: map[string]string{}, ids: map[string]string{}, keys: map[string]string{}}
}

func (s seenUsers) add(from string, u types.User) error {
	check := func(what string, m map[string]string, key string) error {
		if other, ok := m[key]; ok {
			return fmt.Errorf("%s %q is stored twice (%s and %s)", what, key, other, from)
		}
		m[key] = from
		return nil
	}
	errs := []error{check("user", s.names, strings.ToLower(u.UserName)), check("user id", s.ids, u.UserID)}
	for _, k := range u.AccessKeys {
		errs = append(errs, check("access key", s.keys, k.AccessKeyId))
	}
	return errors.Join(errs...)
}

// moveUsers writes the users read from one older store into the database:
// a new row, or the row of the same user id (moved by a killed migration).
func (s *userStore) moveUsers(ctx context.Context, tx *sql.Tx, seen seenUsers, from string, users []types.User) error {
	for _, u := range users {
		if err := seen.add(from, u); err != nil {
			return err
		}
		rid, was, err := readUser(tx.QueryRowContext(ctx, `SELECT rid, id, name, path, data FROM users WHERE id = ?`, u.UserID))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			err = s.insertChecked(ctx, tx, u)
		case err == nil:
			err = storeUser(ctx, tx, rid, keyIDs(was), u)
		}
		if err != nil {
			return fmt.Errorf("move IAM user %q from %s: %w", u.UserName, from, err)
		}
	}
	return nil
}

// insertChecked inserts u if its name is free.
func (s *userStore) insertChecked(ctx context.Context, tx *sql.Tx, u types.User) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM users WHERE folded = ?`, strings.ToLower(u.UserName)).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("a user named %q is in %s already", u.UserName, usersDB)
	}
	return insertUser(ctx, tx, u)
}

// readOlderUsers reads the users of each older user file or folder, on
// every core.
func readOlderUsers(paths []string) ([][]types.User, error) {
	out := make([][]types.User, len(paths))
	err := eachFile(len(paths), func(i int) (err error) {
		if strings.HasSuffix(paths[i], userFileSuffix) {
			out[i], err = readUserFile(paths[i])
		} else {
			out[i], err = readOldStore(paths[i])
		}
		return err
	})
	return out, err
}

// eachFile calls f(0..n-1) on as many goroutines as there are cores (the
// migration's reads, the repair's buckets) and returns the first error.
func eachFile(n int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// readUserFile reads a user's file: the user on its last line.
func readUserFile(path string) ([]types.User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		// A kill -9 cannot leave it (the file was renamed into place
		// written whole); a crash of the machine can, as nothing was
		// fsynced. It held a user: nothing is removed.
		return nil, fmt.Errorf("read IAM user %s: empty: lost in a crash of the machine? Nothing was removed; remove the file to start without its user", path)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	var u types.User
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, fmt.Errorf("read IAM user %s: %w", path, err)
	}
	return []types.User{u}, nil
}

// dropRootUsers rewrites root's file (and its backup) without users,
// durably: they are in the database now.
func dropRootUsers(dir string) error {
	for _, name := range []string{storeFile, backupFile} {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(b) == 0) {
			continue
		}
		if err != nil {
			return err
		}
		// The layout of versitygw's file (storage.InternalStore's
		// iamConfig): the users and their two indexes are emptied, the
		// rest kept as it is.
		var conf map[string]json.RawMessage
		if err := json.Unmarshal(b, &conf); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		for _, field := range []string{"users", "accessKeyIndex", "userNameIndex"} {
			conf[field] = json.RawMessage("{}")
		}
		if b, err = json.Marshal(conf); err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		if err := writeDurable(path, b); err != nil {
			return fmt.Errorf("remove the users moved from %s: %w", path, err)
		}
	}
	return nil
}

// removeOlderUsers removes the users folder (its users moved) and the
// index of an older clean stop, and fsyncs the IAM directory.
func removeOlderUsers(folder, oldIndex string) error {
	entries, err := os.ReadDir(folder)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for i, e := range entries {
		if i == 1 && killedAt("removing") {
			return errKilled
		}
		if err := os.RemoveAll(filepath.Join(folder, e.Name())); err != nil {
			return fmt.Errorf("remove the moved IAM users: %w", err)
		}
	}
	for _, path := range []string{folder, oldIndex, oldIndex + tmpSuffix} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the moved IAM users: %w", err)
		}
	}
	return syncDir(filepath.Dir(folder))
}

// storeFile is the file of versitygw's file store (storage.InternalStore)
// in its directory.
const storeFile = "iam.json"

// backupFile is where the file store copies its file before each change.
const backupFile = storeFile + ".backup"

// readOldStore reads the users of versitygw's store in dir (the older
// layout), none when the store was never written (see unwrittenStore,
// whose cleaning it does first).
func readOldStore(dir string) ([]types.User, error) {
	unwritten, err := unwrittenStore(dir)
	if err != nil || unwritten {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, storeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The layout of versitygw's file (storage.InternalStore's iamConfig):
	// users by name.
	var conf struct {
		Users map[string]types.User `json:"users"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, storeFile), err)
	}
	users := make([]types.User, 0, len(conf.Users))
	for _, u := range conf.Users {
		users = append(users, u)
	}
	return users, nil
}

// unwrittenStore reports whether the store in dir has an empty file that
// never held anything, and removes the temporary files a killed write left.
//
// The file store writes every change to a temporary file renamed over the
// old one, after copying the old one to a backup the same way, so under a
// kill -9 a change is whole or absent; but the very first write, of the
// empty default when the file is missing, is a plain create-then-write,
// and a process killed between the two leaves an empty file that the
// store then refuses to parse ("unexpected end of JSON input") at every
// start after. Such a file has no backup yet: it never held a user (the
// directory of a user whose creation died there is removed, root's file
// is written anew). An empty file WITH a backup is another matter: nothing
// but a crash of the machine (the store does not fsync) truncates a file
// that was renamed into place, and it held users and keys; the store
// refuses to start rather than drop them.
//
// A temporary file ("iam.json" and digits) left by a write that was
// killed before its rename holds a whole copy of the store, secret keys
// included, and is never read again: it is removed.
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
