package s3gateway

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/versity/versitygw/iamapi/storage"
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

// migrateBatch is how many older users the migration reads at once: the
// next batch is read (on every core) while the last one is written, so
// that two are held in memory.
const migrateBatch = 5000

// migrateProgressEvery is how often a long migration says how far it is
// (a variable: the tests log every step).
var migrateProgressEvery = 5 * time.Second

// killMigration, set by tests, simulates a kill -9 of the migration at a
// step: when it returns true there, migrateUsers returns errKilled and
// leaves everything as it is.
var killMigration func(step string) bool

// errKilled is what a migration stopped by killMigration returns.
var errKilled = errors.New("killed (simulated)")

func killedAt(step string) bool { return killMigration != nil && killMigration(step) }

// migrateUsers moves the users of the older layouts into the database and
// then removes them from where they were; it returns how many it moved.
// It logs when it starts, every migrateProgressEvery while it runs and
// when it ends.
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
func (s *userStore) migrateUsers(ctx context.Context, log *slog.Logger) (int, error) {
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
	sources := userSources(folder, entries)
	log.Info("Moving the IAM users of the older layout into the users database: the server serves once they are in",
		"sources", len(sources), "root_users", len(rootUsers), "database", filepath.Join(s.dir, usersDB))
	p := &progress{log: log, began: time.Now(), last: time.Now()}
	n, err := s.moveAll(ctx, rootUsers, sources, p)
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
	if err := retireOlderUsers(s.dir, folder, oldIndex); err != nil {
		return 0, err
	}
	log.Info("Moved the IAM users of the older layout into the users database", "users", n, "took", p.took())
	return n, nil
}

// userSources returns the user files and folders among the users
// folder's entries, each user once. The layout before the database had a
// file per user and migrated a folder per user into it: it wrote the
// user's file (whole, renamed into place) and then removed the folder, so
// a kill in between left both, the same user twice. The file is then the
// complete copy and the folder is left out (it is removed with the rest).
func userSources(folder string, entries []os.DirEntry) []string {
	files := make(map[string]bool)
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, userFileSuffix) {
			files[strings.TrimSuffix(name, userFileSuffix)] = true
		}
	}
	var sources []string // a user file or folder each
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() && files[name]:
		case e.IsDir(), strings.HasSuffix(name, userFileSuffix):
			sources = append(sources, filepath.Join(folder, name))
		}
	}
	return sources
}

// progress logs how far a long migration is, at most every
// migrateProgressEvery.
type progress struct {
	log         *slog.Logger
	began, last time.Time
}

// step logs how many of the sources were moved, if migrateProgressEvery
// has passed since the last line.
func (p *progress) step(done, of int) {
	if time.Since(p.last) < migrateProgressEvery {
		return
	}
	p.last = time.Now()
	p.log.Info("Moving the IAM users of the older layout into the users database", "moved", done, "sources", of, "took", p.took())
}

func (p *progress) took() time.Duration { return time.Since(p.began).Round(time.Millisecond) }

// olderUser is a user read from an older store, with its data column
// (encodeUser), encoded where it was read.
type olderUser struct {
	types.User
	data []byte
}

// olderBatch is the users of a batch of older sources, or the error that
// reading them met.
type olderBatch struct {
	paths []string
	users [][]olderUser
	err   error
}

// moveAll writes root's older users and those of each older user file
// or folder into the database, in one transaction; it returns how many
// it moved. The files are read a batch at a time, on every core, the next
// batch while the last is written.
func (s *userStore) moveAll(ctx context.Context, rootUsers []types.User, sources []string, p *progress) (int, error) {
	root, err := encodeOlder(rootUsers)
	if err != nil {
		return 0, err
	}
	batches := make(chan olderBatch, 1)
	stop := make(chan struct{})
	go readOlderBatches(sources, batches, stop)
	defer func() {
		close(stop)
		for range batches {
		}
	}()
	n := 0
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := newMigrator(ctx, tx)
		if err != nil {
			return err
		}
		defer m.close()
		if err := m.move(ctx, filepath.Join(s.dir, storeFile), root); err != nil {
			return err
		}
		n += len(root)
		done := 0
		for b := range batches {
			if b.err != nil {
				return b.err
			}
			for i, users := range b.users {
				if err := m.move(ctx, b.paths[i], users); err != nil {
					return err
				}
				n += len(users)
			}
			done += len(b.paths)
			p.step(done, len(sources))
		}
		if killedAt("commit") {
			return errKilled
		}
		return nil
	})
	return n, err
}

// readOlderBatches reads sources a batch at a time into batches, which it
// closes after the last one, after an error, or once stop is closed.
func readOlderBatches(sources []string, batches chan<- olderBatch, stop <-chan struct{}) {
	defer close(batches)
	for start := 0; start < len(sources); start += migrateBatch {
		paths := sources[start:min(start+migrateBatch, len(sources))]
		users, err := readOlderUsers(paths)
		select {
		case batches <- olderBatch{paths: paths, users: users, err: err}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
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

// migrator writes older users into the database in the migration's
// transaction, its statements prepared once (a statement not prepared is
// parsed at each call).
//
// Into an empty database (the first start) a user is two inserts or more,
// with no check: seenUsers has checked that no name, id or key comes
// twice among the older users, and the unique indexes would refuse it
// anyway. A database that holds users already (a migration killed after
// its commit, before it removed the older files) needs the checks of a
// change: the row of the same id is left as it is if it is the same, and
// rewritten if not; a new row's name and keys must be free.
type migrator struct {
	tx    *sql.Tx
	seen  seenUsers
	fresh bool // the database held no user when the migration began
	// addUser and addKey insert; byID, nameTaken and keyTaken are the
	// checks of a database that is not fresh.
	addUser, addKey, byID, nameTaken, keyTaken *sql.Stmt
}

func newMigrator(ctx context.Context, tx *sql.Tx) (*migrator, error) {
	m := &migrator{tx: tx, seen: newSeenUsers()}
	var has int
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM users)`).Scan(&has); err != nil {
		return nil, fmt.Errorf("read the users database: %w", err)
	}
	m.fresh = has == 0
	stmts := []struct {
		to  **sql.Stmt
		sql string
	}{
		{&m.addUser, addUserSQL},
		{&m.addKey, addKeySQL},
		{&m.byID, `SELECT rid, id, name, path, data FROM users WHERE id = ?`},
		{&m.nameTaken, nameTakenSQL},
		{&m.keyTaken, keyTakenSQL},
	}
	for _, st := range stmts {
		var err error
		if *st.to, err = tx.PrepareContext(ctx, st.sql); err != nil {
			m.close()
			return nil, fmt.Errorf("prepare the migration's statements: %w", err)
		}
	}
	return m, nil
}

func (m *migrator) close() {
	for _, st := range []*sql.Stmt{m.addUser, m.addKey, m.byID, m.nameTaken, m.keyTaken} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// move writes the users read from one older store into the database.
func (m *migrator) move(ctx context.Context, from string, users []olderUser) error {
	for _, u := range users {
		if err := m.seen.add(from, u.User); err != nil {
			return err
		}
		if err := m.moveOne(ctx, u); err != nil {
			return fmt.Errorf("move IAM user %q from %s: %w", u.UserName, from, err)
		}
	}
	return nil
}

func (m *migrator) moveOne(ctx context.Context, u olderUser) error {
	if m.fresh {
		return m.insert(ctx, u)
	}
	var (
		rid            int64
		id, name, path string
		data           []byte
	)
	err := m.byID.QueryRowContext(ctx, u.UserID).Scan(&rid, &id, &name, &path, &data)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return m.insertChecked(ctx, u)
	case err != nil:
		return fmt.Errorf("read IAM user: %w", err)
	case name == u.UserName && path == u.Path && bytes.Equal(data, u.data):
		return nil // moved by the killed migration, unchanged since
	}
	was, err := decodeUser(id, name, path, data)
	if err != nil {
		return err
	}
	return storeUser(ctx, m.tx, rid, keyIDs(was), u.User)
}

// insertChecked inserts u if its name and its keys are free.
func (m *migrator) insertChecked(ctx context.Context, u olderUser) error {
	var taken bool
	if err := m.nameTaken.QueryRowContext(ctx, strings.ToLower(u.UserName)).Scan(&taken); err != nil {
		return err
	}
	if taken {
		return fmt.Errorf("a user named %q is in %s already", u.UserName, usersDB)
	}
	for _, k := range u.AccessKeys {
		if err := m.keyTaken.QueryRowContext(ctx, k.AccessKeyId).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("write access key %s: %w", k.AccessKeyId, storage.ErrAccessKeyIDAlreadyExists)
		}
	}
	return m.insert(ctx, u)
}

// insert adds u's row and its keys.
func (m *migrator) insert(ctx context.Context, u olderUser) error {
	rid, err := addRow(ctx, m.addUser.ExecContext, u.User, u.data)
	if err != nil {
		return err
	}
	for _, k := range u.AccessKeys {
		if _, err := m.addKey.ExecContext(ctx, k.AccessKeyId, rid); err != nil {
			return fmt.Errorf("write access key %s: %w", k.AccessKeyId, err)
		}
	}
	return nil
}

// encodeOlder pairs each user with its data column.
func encodeOlder(users []types.User) ([]olderUser, error) {
	out := make([]olderUser, len(users))
	for i, u := range users {
		data, err := encodeUser(u)
		if err != nil {
			return nil, err
		}
		out[i] = olderUser{User: u, data: data}
	}
	return out, nil
}

// readOlderUsers reads the users of each older user file or folder, and
// encodes their data columns, on every core.
func readOlderUsers(paths []string) ([][]olderUser, error) {
	out := make([][]olderUser, len(paths))
	err := eachFile(len(paths), func(i int) error {
		var users []types.User
		var err error
		if strings.HasSuffix(paths[i], userFileSuffix) {
			users, err = readUserFile(paths[i])
		} else {
			users, err = readOldStore(paths[i])
		}
		if err != nil {
			return err
		}
		out[i], err = encodeOlder(users)
		return err
	})
	return out, err
}

// eachFile calls f(0..n-1) on as many goroutines as there are cores (the
// migration's reads, the repair's buckets) and returns the first error.
// The goroutines take the next i as they finish one: a goroutine per call
// would grow its stack anew each time (a JSON decoding's stack: 13% of the
// migration's reads).
func eachFile(n int, f func(i int) error) error {
	var (
		g    errgroup.Group
		next atomic.Int64
	)
	for range min(n, runtime.GOMAXPROCS(0)) {
		g.Go(func() error {
			var first error
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil && first == nil {
					first = err
				}
			}
			return first
		})
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

// retireOlderUsers takes the users folder (its users moved) out of the
// migration's way, renamed to movedDir in one step, and removes the index
// of an older clean stop, durably (the IAM directory fsynced). The
// renamed folder is removed by removeMoved, in the background.
func retireOlderUsers(dir, folder, oldIndex string) error {
	moved := filepath.Join(dir, movedDir)
	if dirExists(folder) {
		// A folder moved before and not removed yet: removeMoved
		// reads nothing of it; the newer one takes its place.
		if err := os.RemoveAll(moved); err != nil {
			return fmt.Errorf("remove the moved IAM users: %w", err)
		}
		if killedAt("rename") {
			return errKilled
		}
		if err := os.Rename(folder, moved); err != nil {
			return fmt.Errorf("remove the moved IAM users: %w", err)
		}
	}
	for _, path := range []string{folder, oldIndex, oldIndex + tmpSuffix} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the moved IAM users: %w", err)
		}
	}
	return syncDir(dir)
}

// movedDir is the users folder once its users are in the database and
// durable: renamed so, it is never read again. Removing its 100,000
// entries takes some 3 s at the first start on a data dir of the
// file-per-user layout, 20 s of versitygw's folders (2 shared cores): it
// is removed in the background (removeMoved), and a start whose last
// server stopped before the removal ended goes on with it.
const movedDir = usersDir + ".moved"

// errStopped is what removeDir returns when it was told to stop.
var errStopped = errors.New("stopped")

// removeMoved removes movedDir in the background, if there is one; Close
// stops it (the next start goes on) and waits for it.
func (s *userStore) removeMoved(log *slog.Logger) {
	path := filepath.Join(s.dir, movedDir)
	if !dirExists(path) {
		return
	}
	s.stopRemoval, s.removalDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.removalDone)
		began := time.Now()
		n, err := removeDir(path, s.stopRemoval)
		switch {
		case errors.Is(err, errStopped):
			log.Info("Stopped removing the files of the IAM users moved into the users database: the next start goes on",
				"folder", path, "entries", n)
		case err != nil:
			log.Warn("Cannot remove the files of the IAM users moved into the users database: the next start tries again",
				"folder", path, "entries", n, "error", err)
		default:
			log.Info("Removed the files of the IAM users moved into the users database",
				"folder", path, "entries", n, "took", time.Since(began).Round(time.Millisecond))
		}
	}()
}

// stopRemoving stops removeMoved and waits for it.
func (s *userStore) stopRemoving() {
	if s.stopRemoval != nil {
		close(s.stopRemoval)
		<-s.removalDone
		s.stopRemoval = nil
	}
}

// removeDir removes the folder path and everything in it, an entry at a
// time, until stop is closed; it returns how many entries it removed.
func removeDir(path string, stop <-chan struct{}) (int, error) {
	n := 0
	for {
		removed, err := removeEntries(path, stop)
		n += removed
		if err != nil {
			return n, err
		}
		// An entry the listing missed while it removed (none on
		// Linux's file systems) makes it list again.
		if err := os.Remove(path); !errors.Is(err, syscall.ENOTEMPTY) {
			return n, err
		}
	}
}

// removeEntries removes the entries one listing of the folder path shows,
// until stop is closed.
func removeEntries(path string, stop <-chan struct{}) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		entries, err := f.ReadDir(256)
		for _, e := range entries {
			select {
			case <-stop:
				return n, errStopped
			default:
			}
			if n == 1 && killedAt("removing") {
				return n, errKilled
			}
			if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
				return n, err
			}
			n++
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
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
