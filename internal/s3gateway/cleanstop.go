package s3gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A start reads what a clean stop left, to skip work whose result it
// already holds: the clean-stop marker (cleanStopFile: the bucket repair
// can be skipped). (The IAM users need no such file: their database opens
// without reading them, however the last server ended.) The marker
// follows one rule: a start removes it, and makes the removal durable,
// before the server serves, so that after a start every change is made
// without it on disk, and a process killed after it (kill -9, a crash of
// the machine) leaves none behind; only a stop that completed writes it
// again. A start that does not find it, or
// finds it unreadable or stale, does the full work, as every start did
// before.
//
// "Stale" is about what a process that does not know the marker does
// while the server is stopped: an older bucketbroker (which neither
// removes it nor writes it), or a hand edit. A generation counter bumped
// on every write would miss both: only this code bumps it. What they
// cannot avoid changing is a directory: every start of a server, of any
// version, binds its private socket in the run folder, and a bucket
// created, or half-created by a killed CreateBucket, is an entry in the
// objects folder. The marker therefore records the stamp (dirStamp) of
// the folders it depends on, as they were when it was written, and is
// used only if they are the same at the next start: the change time
// (ctime) cannot be set back by hand as the modification time can (touch
// -d sets the ctime to now), and a folder replaced by another has another
// inode.

// dirStamp is what a folder's stat says about its entries: a change of
// any entry (created, removed, renamed) sets its ctime and mtime to the
// file system's clock.
type dirStamp struct {
	dev, ino     uint64
	ctime, mtime int64 // nanoseconds since the epoch
}

// stampOf stats dir.
func stampOf(dir string) (dirStamp, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return dirStamp{}, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	return dirStamp{
		dev: st.Dev, ino: st.Ino,
		ctime: st.Ctim.Nano(), mtime: st.Mtim.Nano(),
	}, nil
}

// same reports whether two stamps are of one folder with no change
// between them.
func (a dirStamp) same(b dirStamp) bool {
	return a.dev == b.dev && a.ino == b.ino && a.ctime == b.ctime && a.mtime == b.mtime
}

// fsTick bounds the granularity of file system timestamps: the kernel
// stamps files with its coarse clock, which lags the real one by up to a
// scheduler tick (4 ms at HZ=250, 10 ms at HZ=100).
const fsTick = 20 * time.Millisecond

// settle waits, if needed, until a change made from now on to the folders
// of stamps would get a ctime other than theirs: a change within the same
// tick as the last one recorded could otherwise leave the stamp as it was
// (git's "racy clean" index). It is called before a file recording stamps
// is written, at a stop: it waits at most fsTick, and only when a folder
// changed within the last tick.
func settle(stamps ...dirStamp) {
	var latest time.Time
	for _, s := range stamps {
		if c := time.Unix(0, s.ctime); c.After(latest) {
			latest = c
		}
	}
	if wait := time.Until(latest.Add(fsTick)); wait > 0 {
		time.Sleep(wait)
	}
}

// The marker is a magic line, a body, and the CRC-32 (Castagnoli) of
// both: a file cut short or changed is detected and not used.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// sealed is a file's content: magic, body, CRC.
func sealed(magic string, body []byte) []byte {
	b := append([]byte(magic), body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// unseal checks b's magic and CRC and returns its body.
func unseal(magic string, b []byte) ([]byte, error) {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return nil, errors.New("not a file of this version")
	}
	n := len(b) - 4
	if crc32.Checksum(b[:n], crcTable) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, errors.New("checksum mismatch: cut short or changed")
	}
	return b[len(magic):n], nil
}

// tmpSuffix ends the name of a file a write fills before it renames it
// into place (writeDurable, the in-flight file).
const tmpSuffix = ".tmp"

// writeDurable writes b to path durably: a temporary file, fsynced,
// renamed over path, and the folder fsynced, so that after a crash of the
// machine path holds b whole or is absent.
func writeDurable(path string, b []byte) error {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// take reads path and removes it durably (its folder fsynced), as a start
// does with what the last clean stop left; ok is false when there was
// none. A temporary file of a write killed before its rename is removed
// too. The content is returned even if the removal fails: the error says
// the start must not go on.
func take(path string) (b []byte, ok bool, err error) {
	if err := os.Remove(path + tmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	b, err = os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := os.Remove(path); err != nil {
		return nil, false, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, false, err
	}
	return b, true, nil
}

// syncFS makes durable everything written to the file systems that hold
// dirs (syncfs(2) on each).
func syncFS(dirs ...string) error {
	for _, dir := range dirs {
		d, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("sync file system: %w", err)
		}
		err = unix.Syncfs(int(d.Fd()))
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync file system of %s: %w", dir, err)
		}
	}
	return nil
}

// syncDir fsyncs a folder: a rename or removal in it is then durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// encoder and decoder are the marker's body: varints.
type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) stamp(s dirStamp) {
	e.uint(s.dev)
	e.uint(s.ino)
	e.int(s.ctime)
	e.int(s.mtime)
}

type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("cut short")

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) stamp() dirStamp {
	return dirStamp{dev: d.uint(), ino: d.uint(), ctime: d.int(), mtime: d.int()}
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShort
	}
	d.b = nil
}

// done is the decoding's error: cut short, or bytes left over.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) > 0 {
		return fmt.Errorf("%d bytes left over", len(d.b))
	}
	return d.err
}

// cleanStopFile, in the data directory, says the last server stopped
// cleanly: nothing was left half done by a killed call (buckets.go's
// repair has nothing to do).
const cleanStopFile = "clean-stop"

const cleanStopMagic = "bucketbroker clean stop 1\n"

// repairRuns counts the repairs of every bucket started in this process,
// bucketRepairs the buckets repaired by name (repairNamed), for the tests.
var repairRuns, bucketRepairs atomic.Int64

// cleanStopDirs are the folders a clean-stop marker depends on: run
// (every server start binds its socket there) and objects (a bucket
// directory made or removed).
func cleanStopDirs(dataDir string) []string {
	return []string{filepath.Join(dataDir, "run"), filepath.Join(dataDir, "objects")}
}

// writeCleanStop records, at the end of a clean stop, that nothing is
// half done, with the stamps of cleanStopDirs.
func writeCleanStop(dataDir string) error {
	var e encoder
	var stamps []dirStamp
	for _, dir := range cleanStopDirs(dataDir) {
		s, err := stampOf(dir)
		if err != nil {
			return fmt.Errorf("write clean-stop marker: %w", err)
		}
		stamps = append(stamps, s)
		e.stamp(s)
	}
	settle(stamps...)
	if err := writeDurable(filepath.Join(dataDir, cleanStopFile), sealed(cleanStopMagic, e.b)); err != nil {
		return fmt.Errorf("write clean-stop marker: %w", err)
	}
	return nil
}

// takeCleanStop removes the clean-stop marker durably and says whether
// the last server stopped cleanly with nothing changed since (clean): the
// marker was there (found), whole, and its stamps are the folders' now.
// Why it is not used, when it is there, is logged once.
func takeCleanStop(dataDir string, warn func(msg string, args ...any)) (clean, found bool, err error) {
	path := filepath.Join(dataDir, cleanStopFile)
	b, ok, err := take(path)
	if err != nil {
		return false, false, fmt.Errorf("take clean-stop marker: %w", err)
	}
	if !ok {
		return false, false, nil
	}
	why := func() error {
		body, err := unseal(cleanStopMagic, b)
		if err != nil {
			return err
		}
		d := decoder{b: body}
		var recorded []dirStamp
		for range cleanStopDirs(dataDir) {
			recorded = append(recorded, d.stamp())
		}
		if err := d.done(); err != nil {
			return err
		}
		for i, dir := range cleanStopDirs(dataDir) {
			now, err := stampOf(dir)
			if err != nil {
				return err
			}
			if !now.same(recorded[i]) {
				return fmt.Errorf("%s changed since (another server ran, or it was changed by hand)", dir)
			}
		}
		return nil
	}()
	if why != nil {
		warn("The clean-stop marker is not used: every bucket is repaired", "file", path, "error", why)
		return false, true, nil
	}
	return true, true, nil
}
