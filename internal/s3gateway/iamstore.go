package s3gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"golang.org/x/sync/errgroup"

	"github.com/versity/versitygw/iamapi/iamerr"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

// usersDir holds one file per IAM user, under the IAM directory.
const usersDir = "users"

// userStore is the IAM API's storage: a file per user (userFile) for
// users, versitygw's own file store (storage.InternalStore) for the rest.
//
// versitygw keeps every user, key and policy in one JSON file that each
// call reads and parses in full, and that each change reads, backs up,
// parses, encodes and rewrites in full under one lock. A call therefore
// costs time in proportion to the number of users, and all changes wait for
// each other: with 300 users a driver call took about 135 ms against 6 ms
// with a few (BenchmarkProvision). userStore gives each user a file of its
// own, users/u<hex of the user id>.json, so a call reads and writes one
// user's file, and the only state shared between users is in memory,
// built from the files at start (each read once): user name (case-folded,
// as IAM compares names) to store, access key id to store, and the names
// and paths in listing order.
//
// What a userFile decides about its user (limits, tags, policies, keys,
// errors) is versitygw's store's logic for one user. What spans users is
// decided here: a name or a key id is unique across stores, and a user is
// created and deleted with its file. Roles, OIDC providers, sessions, and
// users written before per-user stores existed stay in the IAM
// directory's own iam.json (root), which the embedded Storer serves.
//
// A data directory written before userFile has versitygw's store in a
// folder per user, users/u<hex of the user id>/ (its iam.json and
// iam.json.backup): the first start rewrites each such user into its
// file and then removes the folder (migrate).
type userStore struct {
	storage.Storer // root: roles, OIDC providers, sessions, older users

	dir    string // the IAM directory
	folder string // its users folder, usersDir
	root   *userShard
	// migrated counts the users the open moved from the older layout.
	migrated int
	// indexUnused says why the open did not use the index a clean stop
	// left (iamindex.go), when there was one.
	indexUnused error

	mu    sync.RWMutex
	users map[string]userEntry  // by strings.ToLower(user name)
	keys  map[string]*userShard // by access key id
	ids   map[string]bool       // user ids, unique across stores
	// sorted and the entries' names and paths answer ListUsers without
	// reading every user: the stored names in versitygw's listing order
	// (bytes).
	sorted []string
}

// userEntry is a user in the index: its store, and what ListUsers needs
// to know of it before reading it, its stored name and path (empty while
// the user is being created: not listed yet). One map for both: a user
// costs one map slot, not two (issue 17's memory per instance).
type userEntry struct {
	sh         *userShard
	name, path string
}

// userShard is the store of one user (or root's, of the older users).
// Every call holds mu for reading; deleting the user holds it for writing
// and marks the shard gone, so no call reaches a removed file.
type userShard struct {
	mu    sync.RWMutex
	gone  bool
	store userStorer // a *userFile, or root's versitygw store
}

var _ storage.Storer = (*userStore)(nil)

// newUserStore opens the IAM directory dir and every user file under it,
// migrating the users of an older layout (migrate) and removing what a
// killed write left (a temporary file, or a folder of the older layout
// whose user was never written).
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
	root, err := storage.NewInternal(dir)
	if err != nil {
		return nil, fmt.Errorf("open IAM store %s: %w", dir, err)
	}
	folder := filepath.Join(dir, usersDir)
	if err := os.MkdirAll(folder, 0o700); err != nil {
		return nil, fmt.Errorf("open IAM store: %w", err)
	}
	s := &userStore{
		Storer: root,
		dir:    dir,
		folder: folder,
		root:   &userShard{store: root},
		users:  map[string]userEntry{},
		keys:   map[string]*userShard{},
		ids:    map[string]bool{},
	}
	out, err := root.ListUsers(ctx, storage.ListUsersInput{})
	if err != nil {
		return nil, fmt.Errorf("open IAM store: list IAM users: %w", err)
	}
	for _, u := range out.Users {
		if err := s.add(s.root, indexEntry(u)); err != nil {
			return nil, err
		}
	}
	files, err := s.userFiles()
	if err != nil {
		return nil, err
	}
	found, err := readIndexed(files)
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		if f.base == userFileName(found[i].UserID) {
			// Named by its id, as the store names them: the name is
			// made from the id (shared with the index) when needed.
			f.id, f.base = found[i].UserID, ""
		}
		if err := s.add(&userShard{store: f}, found[i]); err != nil {
			return nil, err
		}
	}
	slices.Sort(s.sorted)
	return s, nil
}

// userFiles indexes the users that the index a clean stop left holds
// (iamindex.go), when it is there and current, and returns the files
// still to read: those it names otherwise than by their ids, or, without
// an index, every file in the users folder (migrate's walk).
func (s *userStore) userFiles() ([]*userFile, error) {
	idx, err := s.takeIndex()
	if err != nil {
		return nil, err
	}
	s.indexUnused = idx.unusedWhy
	if idx.usable {
		for i, f := range idx.files {
			if err := s.add(&userShard{store: f}, idx.users[i]); err != nil {
				return nil, err
			}
		}
		return idx.toRead, nil
	}
	userWalks.Add(1)
	entries, err := s.migrate()
	if err != nil {
		return nil, err
	}
	var files []*userFile
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, userFileSuffix) {
			files = append(files, &userFile{folder: &s.folder, base: name})
		}
	}
	return files, nil
}

// readIndexed reads what the start indexes of each file, on every core;
// in the files' order, so that a name or key stored twice is reported
// the same way each time.
func readIndexed(files []*userFile) ([]indexed, error) {
	found := make([]indexed, len(files))
	bufs := sync.Pool{New: func() any { return new([]byte) }}
	err := eachFile(len(files), func(i int) error {
		recordReads.Add(1)
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		b, err := readFile(files[i].path(), *buf)
		*buf = b
		if err == nil && len(b) == 0 {
			// A kill -9 cannot leave it (the file is renamed into
			// place written whole); a crash of the machine can, as
			// nothing is fsynced. It held a user: nothing is removed.
			err = errors.New("empty: lost in a crash of the machine? Nothing was removed; remove the file to start without its user")
		}
		if err == nil {
			err = decodeIndexed(b, &found[i])
		}
		if err != nil {
			return fmt.Errorf("open IAM store: read IAM user %s: %w", files[i].path(), err)
		}
		return nil
	})
	return found, err
}

// indexed is what the start reads of a user for the indexes, the first
// line of the user's file (encodeUser); its fields are named as in
// types.User, so that a file of the user alone decodes into it too.
type indexed struct {
	UserName   string
	UserID     string
	Path       string
	AccessKeys []indexedKey
}

// indexedKey is an access key in the index line, named as in types.User.
type indexedKey struct {
	AccessKeyID string `json:"AccessKeyId"`
}

func indexEntry(u types.User) indexed {
	e := indexed{UserName: u.UserName, UserID: u.UserID, Path: u.Path}
	for _, k := range u.AccessKeys {
		e.AccessKeys = append(e.AccessKeys, indexedKey{k.AccessKeyId})
	}
	return e
}

// eachFile calls f(0..n-1) on as many goroutines as there are cores (the
// start's reads and decodes, its migration) and returns the first error.
func eachFile(n int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// migrate rewrites the users stored in folders of the older layout
// (users/u<hex>/iam.json, versitygw's store) into files of their own,
// removes the temporary files of killed writes, and returns the users
// folder's entries after.
//
// A user's file is written whole (writeAtomic) before its folder is
// removed: a process killed in between leaves both, and the next start
// writes the file again from the folder, which no call changed since
// (migrate runs before the store serves). A folder without a user (a
// creation killed before it wrote, or a deletion before it removed the
// folder) is removed.
func (s *userStore) migrate() ([]os.DirEntry, error) {
	entries, err := os.ReadDir(s.folder)
	if err != nil {
		return nil, fmt.Errorf("open IAM store: %w", err)
	}
	var old []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case !e.IsDir() && strings.HasSuffix(name, tmpSuffix):
			// A whole copy of a user, secret keys included, that no
			// one reads: removed.
			if err := os.Remove(filepath.Join(s.folder, name)); err != nil {
				return nil, fmt.Errorf("open IAM store: remove a killed write's temporary file: %w", err)
			}
			old = append(old, "")
		case e.IsDir():
			old = append(old, filepath.Join(s.folder, name))
		}
	}
	if len(old) == 0 {
		return entries, nil
	}
	var migrated atomic.Int64
	defer func() { s.migrated = int(migrated.Load()) }()
	err = eachFile(len(old), func(i int) error {
		odir := old[i]
		if odir == "" {
			return nil
		}
		users, err := readOldStore(odir)
		if err != nil {
			return fmt.Errorf("open IAM store: %w", err)
		}
		migrated.Add(int64(len(users)))
		for _, u := range users {
			f := &userFile{folder: &s.folder, id: u.UserID}
			if err := f.write(u); err != nil {
				return fmt.Errorf("open IAM store: migrate user %q from %s: %w", u.UserName, odir, err)
			}
		}
		if err := os.RemoveAll(odir); err != nil {
			return fmt.Errorf("open IAM store: remove %s (its users are in files of their own now): %w", odir, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	entries, err = os.ReadDir(s.folder)
	if err != nil {
		return nil, fmt.Errorf("open IAM store: %w", err)
	}
	return entries, nil
}

// userFileName is the name of the file of the user with this id.
func userFileName(id string) string {
	return "u" + hex.EncodeToString([]byte(id)) + userFileSuffix
}

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

// storeFile is the file of versitygw's file store (storage.InternalStore)
// in its directory.
const storeFile = "iam.json"

// backupFile is where the file store copies its file before each change.
const backupFile = storeFile + ".backup"

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

// add puts users, stored in sh, and their keys in the indexes (at start
// only; s.sorted is sorted after).
func (s *userStore) add(sh *userShard, users ...indexed) error {
	for _, u := range users {
		if other := s.users[strings.ToLower(u.UserName)].sh; other != nil {
			return fmt.Errorf("open IAM store: user %q is stored twice (%s and %s)", u.UserName, other.where(s.dir), sh.where(s.dir))
		}
		s.users[strings.ToLower(u.UserName)] = userEntry{sh: sh, name: u.UserName, path: s.intern(u.Path)}
		s.ids[u.UserID] = true
		s.sorted = append(s.sorted, u.UserName)
		for _, k := range u.AccessKeys {
			if other := s.keys[k.AccessKeyID]; other != nil {
				return fmt.Errorf("open IAM store: access key %s is stored twice (%s and %s)", k.AccessKeyID, other.where(s.dir), sh.where(s.dir))
			}
			s.keys[k.AccessKeyID] = sh
		}
	}
	return nil
}

// intern returns path held once in memory for all the users that have
// it: they share a handful of paths (the driver's one).
func (s *userStore) intern(path string) string { return unique.Make(path).Value() }

// unlist takes the user known as key out of the listing; its entry,
// if any, stays in the index with its store. Under s.mu.
func (s *userStore) unlist(key string) {
	e, ok := s.users[key]
	if !ok || e.name == "" {
		return
	}
	if i, found := slices.BinarySearch(s.sorted, e.name); found {
		s.sorted = slices.Delete(s.sorted, i, i+1)
	}
	e.name, e.path = "", ""
	s.users[key] = e
}

// list puts u in the listing, as stored now: its entry in the index
// (which has its store already) gets its name and path. Under s.mu.
func (s *userStore) list(u *types.User) {
	key := strings.ToLower(u.UserName)
	e := s.users[key]
	e.name, e.path = u.UserName, s.intern(u.Path)
	s.users[key] = e
	if i, found := slices.BinarySearch(s.sorted, u.UserName); !found {
		s.sorted = slices.Insert(s.sorted, i, u.UserName)
	}
}

func (sh *userShard) where(dir string) string {
	if f, ok := sh.store.(*userFile); ok {
		return f.path()
	}
	return filepath.Join(dir, storeFile)
}

// withUser runs f on the store of the named user while that store cannot be
// deleted.
func (s *userStore) withUser(name string, f func(userStorer) error) error {
	return s.withShard(name, func(sh *userShard) error { return f(sh.store) })
}

// from runs f through with (s.withUser for a user's name, s.withKey for an
// access key id) and returns what f answers: withUser and withKey for a
// call that answers a value.
func from[T any](with func(string, func(userStorer) error) error, id string, f func(userStorer) (T, error)) (T, error) {
	var out T
	err := with(id, func(st userStorer) (err error) {
		out, err = f(st)
		return err
	})
	return out, err
}

// shard returns the named user's shard as the index has it now, or IAM's
// NoSuchEntity. The shard may be deleted after: callers check sh.gone
// under sh.mu.
func (s *userStore) shard(name string) (*userShard, error) {
	s.mu.RLock()
	sh := s.users[strings.ToLower(name)].sh
	s.mu.RUnlock()
	if sh == nil {
		return nil, iamerr.NoSuchEntityUser(name)
	}
	return sh, nil
}

// withShard runs f with the named user's shard while it cannot be deleted.
// A shard deleted between the lookup and the call is looked up again: the
// name may have been created anew.
func (s *userStore) withShard(name string, f func(*userShard) error) error {
	for {
		sh, err := s.shard(name)
		if err != nil {
			return err
		}
		sh.mu.RLock()
		if !sh.gone {
			defer sh.mu.RUnlock()
			return f(sh)
		}
		sh.mu.RUnlock()
	}
}

// withKey is withUser for the user that holds an access key.
func (s *userStore) withKey(id string, f func(userStorer) error) error {
	s.mu.RLock()
	sh := s.keys[id]
	s.mu.RUnlock()
	if sh == nil {
		return iamerr.NoSuchEntityAccessKey(id)
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if sh.gone {
		return iamerr.NoSuchEntityAccessKey(id)
	}
	return f(sh.store)
}

// CreateUser creates the user in a store of its own. The name is taken in
// the index first, with the new shard locked, so that calls for the name
// wait until the user is written (or find it gone if that failed).
func (s *userStore) CreateUser(ctx context.Context, user types.User) (*types.User, error) {
	key := strings.ToLower(user.UserName)
	sh := &userShard{}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.mu.Lock()
	switch {
	case s.users[key].sh != nil:
		s.mu.Unlock()
		return nil, iamerr.EntityAlreadyExistsUser(user.UserName)
	case s.ids[user.UserID]:
		s.mu.Unlock()
		return nil, storage.ErrUserIDAlreadyExists
	}
	s.users[key] = userEntry{sh: sh}
	s.ids[user.UserID] = true
	s.mu.Unlock()

	created, err := s.createIn(ctx, sh, user)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		sh.gone = true
		delete(s.users, key)
		delete(s.ids, user.UserID)
		return nil, err
	}
	s.list(created)
	return created, nil
}

func (s *userStore) createIn(_ context.Context, sh *userShard, user types.User) (*types.User, error) {
	f := &userFile{folder: &s.folder, id: user.UserID}
	created, err := f.create(user)
	if err != nil {
		return nil, err
	}
	sh.store = f
	return created, nil
}

// DeleteUser deletes the user (its store refuses while it has keys or
// policies, as IAM does; a userFile removes its file).
func (s *userStore) DeleteUser(ctx context.Context, name string) error {
	for {
		sh, err := s.shard(name)
		if err != nil {
			return err
		}
		done, err := s.deleteFrom(ctx, sh, name)
		if done {
			return err
		}
	}
}

// deleteFrom deletes name from sh; done is false when sh was gone already.
func (s *userStore) deleteFrom(ctx context.Context, sh *userShard, name string) (done bool, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gone {
		return false, nil
	}
	u, err := sh.store.GetUser(ctx, name)
	if err != nil {
		return true, err
	}
	if err := sh.store.DeleteUser(ctx, name); err != nil {
		return true, err
	}
	s.mu.Lock()
	s.unlist(strings.ToLower(u.UserName))
	delete(s.users, strings.ToLower(u.UserName))
	delete(s.ids, u.UserID)
	s.mu.Unlock()
	if sh != s.root { // root: other users live there
		sh.gone = true
	}
	return true, nil
}

// UpdateUser renames or moves the user. A new name is taken in the index
// before the store is changed and the old one released after.
func (s *userStore) UpdateUser(ctx context.Context, input storage.UpdateUserInput) (*types.User, error) {
	oldKey, newKey := strings.ToLower(input.UserName), strings.ToLower(input.NewUserName)
	if input.NewUserName == "" || newKey == oldKey {
		var out *types.User
		err := s.withUser(input.UserName, func(st userStorer) (err error) {
			if out, err = st.UpdateUser(ctx, input); err == nil {
				// Its path, or the case of its name, may have changed.
				s.mu.Lock()
				s.unlist(oldKey)
				s.list(out)
				s.mu.Unlock()
			}
			return err
		})
		return out, err
	}
	for {
		s.mu.RLock()
		sh := s.users[oldKey].sh
		s.mu.RUnlock()
		if sh == nil {
			return nil, iamerr.NoSuchEntityUser(input.UserName)
		}
		out, done, err := s.renameIn(ctx, sh, input)
		if done {
			return out, err
		}
	}
}

func (s *userStore) renameIn(ctx context.Context, sh *userShard, input storage.UpdateUserInput) (*types.User, bool, error) {
	oldKey, newKey := strings.ToLower(input.UserName), strings.ToLower(input.NewUserName)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gone {
		return nil, false, nil
	}
	s.mu.Lock()
	if s.users[newKey].sh != nil {
		s.mu.Unlock()
		return nil, true, iamerr.EntityAlreadyExistsUser(input.NewUserName)
	}
	s.users[newKey] = userEntry{sh: sh}
	s.mu.Unlock()
	out, err := sh.store.UpdateUser(ctx, input)
	s.mu.Lock()
	if err != nil {
		delete(s.users, newKey)
	} else {
		s.unlist(oldKey)
		delete(s.users, oldKey)
		s.list(out)
	}
	s.mu.Unlock()
	return out, true, err
}

// ListUsers lists the users of every store, sorted and paged as
// versitygw's store does, from the names and paths kept in memory: only the
// page's users are read (the audit pages through every user: reading every
// store for each page made it quadratic).
func (s *userStore) ListUsers(ctx context.Context, input storage.ListUsersInput) (*storage.ListUsersOutput, error) {
	limit := math.MaxInt
	if input.MaxItems > 0 {
		limit = int(input.MaxItems)
	}
	var (
		page []string
		more bool
	)
	s.mu.RLock()
	// The page starts after the marker's place in the order, not after
	// the marker itself: a user deleted between two pages (the audit and
	// the driver's inventory page while unbinds run) must not end the
	// listing early.
	start := 0
	if input.Marker != "" {
		start = sort.Search(len(s.sorted), func(i int) bool { return s.sorted[i] > input.Marker })
	}
	for _, name := range s.sorted[start:] {
		if !strings.HasPrefix(s.users[strings.ToLower(name)].path, input.PathPrefix) {
			continue
		}
		if len(page) == limit {
			more = true
			break
		}
		page = append(page, name)
	}
	s.mu.RUnlock()

	out := &storage.ListUsersOutput{Users: make([]types.User, 0, len(page))}
	for _, name := range page {
		u, err := s.GetUser(ctx, name)
		if iamCode(err) == "NoSuchEntity" {
			continue // deleted since
		}
		if err != nil {
			return nil, err
		}
		out.Users = append(out.Users, *u)
	}
	if more {
		out.IsTruncated = true
		out.Marker = page[len(page)-1]
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
	return from(s.withUser, name, func(st userStorer) (*types.User, error) { return st.GetUser(ctx, name) })
}

func (s *userStore) GetUserByAccessKeyID(ctx context.Context, id string) (*types.User, error) {
	return from(s.withKey, id, func(st userStorer) (*types.User, error) { return st.GetUserByAccessKeyID(ctx, id) })
}

func (s *userStore) TagUser(ctx context.Context, name string, tags []types.Tag) error {
	return s.withUser(name, func(st userStorer) error { return st.TagUser(ctx, name, tags) })
}

func (s *userStore) UntagUser(ctx context.Context, name string, keys []string) error {
	return s.withUser(name, func(st userStorer) error { return st.UntagUser(ctx, name, keys) })
}

func (s *userStore) ListUserTags(ctx context.Context, input storage.ListUserTagsInput) (*storage.ListTagsOutput, error) {
	return from(s.withUser, input.UserName, func(st userStorer) (*storage.ListTagsOutput, error) { return st.ListUserTags(ctx, input) })
}

// CreateAccessKey takes the key id in the index before the store writes the
// key: ids are unique across stores. A request signed with the key cannot
// come before the key's creator has the answer, so the index is never
// behind a key in use.
func (s *userStore) CreateAccessKey(ctx context.Context, input storage.CreateAccessKeyInput) (*types.AccessKey, error) {
	var out *types.AccessKey
	err := s.withShard(input.UserName, func(sh *userShard) error {
		s.mu.Lock()
		if s.keys[input.AccessKeyID] != nil {
			s.mu.Unlock()
			return storage.ErrAccessKeyIDAlreadyExists
		}
		s.keys[input.AccessKeyID] = sh
		s.mu.Unlock()
		var err error
		if out, err = sh.store.CreateAccessKey(ctx, input); err != nil {
			s.mu.Lock()
			delete(s.keys, input.AccessKeyID)
			s.mu.Unlock()
		}
		return err
	})
	return out, err
}

func (s *userStore) UpdateAccessKey(ctx context.Context, input storage.UpdateAccessKeyInput) error {
	return s.withUser(input.UserName, func(st userStorer) error { return st.UpdateAccessKey(ctx, input) })
}

// DeleteAccessKey deletes the key from the user's store, which is what
// every signature check reads: the key is refused from then on. The index
// entry goes after.
func (s *userStore) DeleteAccessKey(ctx context.Context, name, id string) error {
	return s.withShard(name, func(sh *userShard) error {
		if err := sh.store.DeleteAccessKey(ctx, name, id); err != nil {
			return err
		}
		s.mu.Lock()
		if s.keys[id] == sh {
			delete(s.keys, id)
		}
		s.mu.Unlock()
		return nil
	})
}

func (s *userStore) GetAccessKeyLastUsed(ctx context.Context, id string) (*storage.GetAccessKeyLastUsedOutput, error) {
	return from(s.withKey, id, func(st userStorer) (*storage.GetAccessKeyLastUsedOutput, error) {
		return st.GetAccessKeyLastUsed(ctx, id)
	})
}

func (s *userStore) ListAccessKeys(ctx context.Context, input storage.ListAccessKeysInput) (*storage.ListAccessKeysOutput, error) {
	return from(s.withUser, input.UserName, func(st userStorer) (*storage.ListAccessKeysOutput, error) { return st.ListAccessKeys(ctx, input) })
}

func (s *userStore) RecordAccessKeyUsage(ctx context.Context, id, service, region string, when time.Time) error {
	return s.withKey(id, func(st userStorer) error { return st.RecordAccessKeyUsage(ctx, id, service, region, when) })
}

func (s *userStore) PutUserPolicy(ctx context.Context, input storage.PutUserPolicyInput) error {
	return s.withUser(input.UserName, func(st userStorer) error { return st.PutUserPolicy(ctx, input) })
}

func (s *userStore) GetUserPolicy(ctx context.Context, name, policy string) (*types.PolicyEntry, error) {
	return from(s.withUser, name, func(st userStorer) (*types.PolicyEntry, error) { return st.GetUserPolicy(ctx, name, policy) })
}

func (s *userStore) DeleteUserPolicy(ctx context.Context, name, policy string) error {
	return s.withUser(name, func(st userStorer) error { return st.DeleteUserPolicy(ctx, name, policy) })
}

func (s *userStore) ListUserPolicies(ctx context.Context, input storage.ListUserPoliciesInput) (*storage.ListUserPoliciesOutput, error) {
	return from(s.withUser, input.UserName, func(st userStorer) (*storage.ListUserPoliciesOutput, error) { return st.ListUserPolicies(ctx, input) })
}
