package s3gateway

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
)

// indexFile, in the IAM directory, is the index of the users folder as a
// clean stop left it (saveIndex): what a start would read from the first
// line of each user's file (indexed), so that a start after a clean stop
// reads one file instead of one per user (100,000 at issue 17's scale:
// half of a restart's CPU). It is used only as cleanstop.go says: taken
// (removed durably) by the start, before the server serves, and only when
// the users folder's stamp is the one it records.
const indexFile = "index"

const indexMagic = "bucketbroker IAM index 1\n"

// userWalks counts the starts in this process that read every user's
// file (the walk the index saves), for the tests.
var userWalks atomic.Int64

// saveIndex writes the index of the users in files, with the users
// folder's stamp, durably. It is called when the IAM API has stopped,
// nothing else writing: a user still being created (not listed yet)
// would be a change under way, and no index is written then.
func (s *userStore) saveIndex() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	stamp, err := stampOf(s.folder)
	if err != nil {
		return fmt.Errorf("save IAM index: %w", err)
	}
	keys := make(map[*userShard][]string, len(s.keys))
	for id, sh := range s.keys {
		keys[sh] = append(keys[sh], id)
	}
	var e encoder
	e.stamp(stamp)
	n := 0
	for _, u := range s.users {
		if u.sh != s.root {
			n++
		}
	}
	e.uint(uint64(n))
	for _, u := range s.users {
		if u.sh == s.root {
			continue // root's users are read from root's file
		}
		f, ok := u.sh.store.(*userFile)
		if !ok || u.name == "" || u.sh.gone {
			return errors.New("save IAM index: a user is being created or deleted")
		}
		// A file named otherwise than by its id (by hand) is read at
		// start: the index does not keep the ids of those.
		e.str(f.base)
		if f.base != "" {
			continue
		}
		e.str(f.id)
		e.str(u.name)
		e.str(u.path)
		e.uint(uint64(len(keys[u.sh])))
		for _, k := range keys[u.sh] {
			e.str(k)
		}
	}
	settle(stamp)
	if err := writeDurable(filepath.Join(s.dir, indexFile), sealed(indexMagic, e.b)); err != nil {
		return fmt.Errorf("save IAM index: %w", err)
	}
	return nil
}

// fromIndex is what a start takes from the index: the users of the
// files named by their ids, and the other files, to be read.
type fromIndex struct {
	files     []*userFile
	users     []indexed
	toRead    []*userFile
	usable    bool
	unusedWhy error // set when an index was there but not used
}

// takeIndex takes the index (cleanstop.go's take) and decodes it if it
// is whole and the users folder is as it records.
func (s *userStore) takeIndex() (fromIndex, error) {
	var out fromIndex
	b, ok, err := take(filepath.Join(s.dir, indexFile))
	if err != nil {
		return out, fmt.Errorf("open IAM store: take the index: %w", err)
	}
	if !ok {
		return out, nil
	}
	if out.unusedWhy = s.decodeIndex(b, &out); out.unusedWhy != nil {
		return fromIndex{unusedWhy: out.unusedWhy}, nil
	}
	out.usable = true
	return out, nil
}

func (s *userStore) decodeIndex(b []byte, out *fromIndex) error {
	body, err := unseal(indexMagic, b)
	if err != nil {
		return err
	}
	d := decoder{b: body}
	recorded := d.stamp()
	n := d.uint()
	if n > uint64(len(d.b)) { // an entry takes a byte at least
		return errShort
	}
	for range n {
		base := d.str()
		if base != "" {
			out.toRead = append(out.toRead, &userFile{folder: &s.folder, base: base})
			continue
		}
		u := indexed{UserID: d.str(), UserName: d.str(), Path: d.str()}
		nk := d.uint()
		if nk > uint64(len(d.b)) {
			return errShort
		}
		for range nk {
			u.AccessKeys = append(u.AccessKeys, indexedKey{d.str()})
		}
		if d.err != nil {
			return d.err
		}
		out.files = append(out.files, &userFile{folder: &s.folder, id: u.UserID})
		out.users = append(out.users, u)
	}
	if err := d.done(); err != nil {
		return err
	}
	now, err := stampOf(s.folder)
	if err != nil {
		return err
	}
	if !now.same(recorded) {
		return fmt.Errorf("%s changed since (by another server, or by hand)", s.folder)
	}
	return nil
}
