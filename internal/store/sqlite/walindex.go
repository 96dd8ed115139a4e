//go:build unix

package sqlite

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// walHeader is one copy of the WAL-index header: the first 48 bytes of the
// database's -shm file, as 12 native-order words (SQLite's WalIndexHdr,
// https://www.sqlite.org/walformat.html). Every commit rewrites it (its
// change counter, last frame, frame checksum; a WAL restart also changes
// the salts), and SQLite's readers find the newest commit through it, so
// the same header means that nothing was committed in between.
type walHeader [12]uint32

// walIndexHeaderWords is the two copies of the header, which every
// writer stores second copy first and a reader compares.
const walIndexHeaderWords = 2 * len(walHeader{})

// walIndex is a read-only mapping of the first page of the -shm file of a
// database in WAL mode, shared with SQLite in this and every other process
// that has the file open.
type walIndex struct {
	key walIndexKey
	// mu is held for reading while the header is read and for writing
	// while the mapping is released: a Get racing Close reads the header
	// before the unmapping or finds no mapping, never unmapped memory.
	mu sync.RWMutex
	// words is the mapping, nil once released (a Get after Close then
	// goes to the closed database and fails, never to unmapped memory).
	words atomic.Pointer[[walIndexHeaderWords]uint32]
	// released makes a second release (a second Close) do nothing.
	released atomic.Bool
}

// header returns the WAL-index header as it is now, and false when it is
// being written (the two copies differ) or not initialized, when a
// reader must not rely on it. It reads the first copy first, as SQLite's
// readers do (walIndexTryHdr); writers store the second copy first.
func (w *walIndex) header() (walHeader, bool) {
	var h1, h2 walHeader
	if w == nil {
		return h1, false
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	words := w.words.Load()
	if words == nil {
		return h1, false
	}
	if testHookHeaderRead != nil {
		testHookHeaderRead()
	}
	for i := range h1 {
		h1[i] = atomic.LoadUint32(&words[i])
	}
	for i := range h2 {
		h2[i] = atomic.LoadUint32(&words[len(h1)+i])
	}
	// isInit is byte 12 of the header (the fourth word's first byte).
	isInit := (*[48]byte)(unsafe.Pointer(&h1))[12]
	return h1, h1 == h2 && isInit != 0
}

// testHookHeaderRead, when set by a test, runs in header between taking
// the mapping and reading it.
var testHookHeaderRead func()

// checkCommitted is called after a commit of this Store's writer, with
// the header read before it: a commit rewrites the header before it
// returns, so a header found unchanged is not the one SQLite writes (a
// stale file under the name, a layout this code does not know), and Gets
// stop relying on it for good.
func (w *walIndex) checkCommitted(before walHeader) {
	if w == nil {
		return
	}
	if after, ok := w.header(); ok && after == before {
		w.words.Store(nil)
	}
}

// walIndexKey names an -shm file by its inode: Stores on one database in
// this process share one mapping and one descriptor.
type walIndexKey struct{ dev, ino uint64 }

// walIndexes holds the -shm files mapped in this process. The descriptor
// of each stays open until the last Store on that database closes,
// because closing any descriptor of a file drops every POSIX lock this
// process holds on it, SQLite's locks on the -shm file included: another
// Store's connections would lose their claim on the WAL index, and another
// process could then reinitialize it under them.
var walIndexes = struct {
	sync.Mutex
	m map[walIndexKey]*walIndexFile
}{m: make(map[walIndexKey]*walIndexFile)}

type walIndexFile struct {
	f    *os.File
	mem  []byte
	refs int
}

// openWALIndex maps the -shm file of the database at dbPath, or returns a
// walIndex without a mapping (header always false) when it cannot. A
// connection of this Store must have the database open in WAL mode already:
// SQLite created the file and holds its lock on it, so that no other
// process reinitializes or truncates it while it is mapped.
func openWALIndex(dbPath string) *walIndex {
	walIndexes.Lock()
	defer walIndexes.Unlock()
	path := dbPath + "-shm"
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil
	}
	key := walIndexKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	if wf, ok := walIndexes.m[key]; ok {
		wf.refs++
		return newWALIndex(key, wf.mem)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	// From here on the descriptor stays open until release: closing it
	// would drop SQLite's locks on the file (above).
	wf := &walIndexFile{f: f, refs: 1}
	walIndexes.m[key] = wf
	if fi, err := f.Stat(); err != nil || fi.Size() < int64(walIndexHeaderWords*4) {
		return newWALIndex(key, nil)
	}
	if wf.mem, err = unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED); err != nil {
		wf.mem = nil
	}
	return newWALIndex(key, wf.mem)
}

func newWALIndex(key walIndexKey, mem []byte) *walIndex {
	w := &walIndex{key: key}
	if len(mem) >= walIndexHeaderWords*4 {
		w.words.Store((*[walIndexHeaderWords]uint32)(unsafe.Pointer(&mem[0])))
	}
	return w
}

// forget makes header answer false from now on, waiting for reads in
// progress; the mapping stays until release. Close calls it before it
// closes the connections, whose locks keep other processes from
// reinitializing the file.
func (w *walIndex) forget() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.words.Store(nil)
	w.mu.Unlock()
}

// release drops this Store's use of the mapping; the last one unmaps it
// and closes its descriptor. Call it after the Store's connections are
// closed.
func (w *walIndex) release() error {
	if w == nil || w.released.Swap(true) {
		return nil
	}
	w.forget()
	walIndexes.Lock()
	defer walIndexes.Unlock()
	wf, ok := walIndexes.m[w.key]
	if !ok {
		return nil
	}
	if wf.refs--; wf.refs > 0 {
		return nil
	}
	delete(walIndexes.m, w.key)
	var err error
	if wf.mem != nil {
		err = unix.Munmap(wf.mem)
	}
	if cerr := wf.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unmap wal index: %w", err)
	}
	return nil
}
