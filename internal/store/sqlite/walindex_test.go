//go:build unix

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// helperEnv names the database file a re-run of this test binary writes to
// (TestHelperProcessWrite), as another broker process on the same file
// would.
const helperEnv = "BUCKETBROKER_SQLITE_HELPER_DB"

// TestHelperProcessWrite is not a test: run by writeInOtherProcess in a
// child process, it advances record b1 by one version with its own Store.
func TestHelperProcessWrite(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("run by writeInOtherProcess")
	}
	s := open(t, path)
	r, err := s.Get(t.Context(), engine.KindBinding, "b1")
	if err != nil {
		t.Fatal(err)
	}
	r.Phase = engine.PhaseReady
	r.Op.Description = "written by process " + strconv.Itoa(os.Getpid())
	if err := s.Update(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

// writeInOtherProcess advances record b1 in the file at path from another
// process.
func writeInOtherProcess(t *testing.T, path string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestHelperProcessWrite$", "-test.count", "1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write in another process: %v\n%s", err, out)
	}
}

// TestGetSeesOtherProcessWrites: a Get answers from its decoded record
// only while the file's WAL-index header is unchanged, so a record another
// process advanced is read again, every time.
func TestGetSeesOtherProcessWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s := open(t, path)
	ctx := t.Context()
	if err := s.Insert(ctx, record("b1")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		before, err := s.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, engine.KindBinding, "b1"); err != nil { // from memory
			t.Fatal(err)
		}
		writeInOtherProcess(t, path)
		got, err := s.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != before.Version+1 || got.Phase != engine.PhaseReady {
			t.Fatalf("round %d: after another process's write Get = v%d phase %q, want v%d %q",
				i, got.Version, got.Phase, before.Version+1, engine.PhaseReady)
		}
	}
}

// TestGetSeesOtherProcessInsert: a Get that found no record remembers
// that only while nothing is committed; a record another process inserted
// since is found.
func TestGetSeesOtherProcessInsert(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s := open(t, path)
	ctx := t.Context()
	if err := s.Insert(ctx, record("other")); err != nil { // the file and its schema
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Get(ctx, engine.KindBinding, "b1"); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("Get before the insert = %v, want ErrNotFound", err)
		}
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestHelperProcessInsert$", "-test.count", "1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("insert in another process: %v\n%s", err, out)
	}
	if _, err := s.Get(ctx, engine.KindBinding, "b1"); err != nil {
		t.Fatalf("Get after another process inserted the record = %v, want it", err)
	}
}

// TestHelperProcessInsert is not a test: run by TestGetSeesOtherProcessInsert
// in a child process, it inserts record b1 with its own Store.
func TestHelperProcessInsert(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("run by TestGetSeesOtherProcessInsert")
	}
	if err := open(t, path).Insert(t.Context(), record("b1")); err != nil {
		t.Fatal(err)
	}
}

// TestGetAnswersFromMemoryWhileUnchanged pins the shortcut itself: with
// nothing committed since the record was read, a Get makes no statement
// (it still answers with the reader's statement closed), and a commit by
// another Store on the file, to any record, sends Gets back to the file.
func TestGetAnswersFromMemoryWhileUnchanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	a, b := open(t, path), open(t, path)
	ctx := t.Context()
	for _, id := range []string{"b1", "b2"} {
		if err := a.Insert(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := a.wal.header(); !ok {
		t.Fatal("the WAL-index header is not mapped: every Get reads the file")
	}
	if _, err := a.Get(ctx, engine.KindBinding, "b1"); err != nil {
		t.Fatal(err)
	}
	h0, _ := a.wal.header()

	// Another Store's commit to another record changes the header.
	r2, err := b.Get(ctx, engine.KindBinding, "b2")
	if err != nil {
		t.Fatal(err)
	}
	r2.Op.Description = "changed"
	if err := b.Update(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if h1, _ := a.wal.header(); h1 == h0 {
		t.Fatal("another Store's commit left the WAL-index header as it was")
	}

	if _, err := a.Get(ctx, engine.KindBinding, "b1"); err != nil { // read again, then current
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, engine.KindBinding, "b3"); !errors.Is(err, engine.ErrNotFound) { // none, then known
		t.Fatalf("Get of a missing record = %v, want ErrNotFound", err)
	}
	if err := a.get.Close(); err != nil { // every further statement fails
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := a.Get(ctx, engine.KindBinding, "b1")
		if err != nil {
			t.Fatalf("Get %d with nothing committed since: %v (a statement was made)", i, err)
		}
		if got.Version != 1 {
			t.Fatalf("Get %d = v%d, want v1", i, got.Version)
		}
		if _, err := a.Get(ctx, engine.KindBinding, "b3"); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("Get %d of the missing record with nothing committed since = %v, want ErrNotFound without a statement", i, err)
		}
	}
	r1, err := b.Get(ctx, engine.KindBinding, "b1")
	if err != nil {
		t.Fatal(err)
	}
	r1.Op.Description = "changed"
	if err := b.Update(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Get(ctx, engine.KindBinding, "b1"); err == nil {
		t.Fatalf("Get after another Store's commit answered v%d from memory; want a read (which fails here)", got.Version)
	}
	if err := b.Insert(ctx, record("b3")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, engine.KindBinding, "b3"); err == nil || errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after another Store inserted the record = %v; want a read (which fails here), not the none remembered", err)
	}
}

// TestStoresShareOneMapping: Stores on one file in this process share the
// -shm file's descriptor, which stays open (keeping SQLite's locks on the
// file) until the last of them closes.
func TestStoresShareOneMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	a, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, path)
	if a.wal == nil || b.wal == nil || a.wal.key != b.wal.key {
		t.Fatalf("two Stores on one file: wal %v and %v, want one mapping", a.wal, b.wal)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	walIndexes.Lock()
	wf := walIndexes.m[b.wal.key]
	walIndexes.Unlock()
	if wf == nil || wf.refs != 1 {
		t.Fatalf("after one of two Stores closed: mapping %+v, want it kept for the other", wf)
	}
	if err := b.Insert(t.Context(), record("b1")); err != nil {
		t.Fatal(fmt.Errorf("the other Store after the first closed: %w", err))
	}
	if _, ok := b.wal.header(); !ok {
		t.Fatal("the other Store's header is gone")
	}
}

// TestCloseDuringGets: a Get reading the mapped header while the Store
// closes finishes its read before the mapping goes (the release waits for
// it): without that, the read after the pause below faults on unmapped
// memory and the test binary dies.
func TestCloseDuringGets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(t.Context(), record("b1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), engine.KindBinding, "b1"); err != nil {
		t.Fatal(err)
	}
	inRead := make(chan struct{})
	var once sync.Once
	testHookHeaderRead = func() {
		once.Do(func() {
			close(inRead)
			// Give Close the time to release the mapping, were it not
			// waiting for this read.
			time.Sleep(100 * time.Millisecond)
		})
	}
	defer func() { testHookHeaderRead = nil }()
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(context.Background(), engine.KindBinding, "b1")
		got <- err
	}()
	<-inRead
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Get during Close: %v, want the record or a closed-database error", err)
	}
}

// BenchmarkFreshnessCheck compares what each way of knowing that a decoded
// record is still current costs per call: the version read (the statement
// a Get made before, and still makes after any commit), PRAGMA
// data_version on a connection of its own (a statement too, which begins
// and ends a read transaction), and the WAL-index header read from the
// mapping (what a Get does now).
func BenchmarkFreshnessCheck(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "bucketbroker.db"))
	ctx := b.Context()
	if err := s.Insert(ctx, record("b1")); err != nil {
		b.Fatal(err)
	}
	b.Run("version-statement", func(b *testing.B) {
		var version int64
		var data []byte
		for b.Loop() {
			if err := s.get.QueryRowContext(ctx, 1, engine.KindBinding, "b1").Scan(&version, &data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pragma-data_version", func(b *testing.B) {
		c, err := s.readers.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		st, err := c.PrepareContext(ctx, `PRAGMA data_version`)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		var v int64
		for b.Loop() {
			if err := st.QueryRowContext(ctx).Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wal-index-header", func(b *testing.B) {
		for b.Loop() {
			if _, ok := s.wal.header(); !ok {
				b.Fatal("header not mapped")
			}
		}
	})
}

// TestWALIndexFollowsSymlink: SQLite names the -shm file after the
// database file with symbolic links resolved; the Store maps that one
// (not a file next to the link, which SQLite never writes) and sees
// another Store's commits through it.
func TestWALIndexFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.db")
	b := open(t, target)
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	a := open(t, link)
	if _, ok := a.wal.header(); !ok {
		t.Fatal("the WAL-index header of a database opened through a symbolic link is not mapped")
	}
	ctx := t.Context()
	if err := b.Insert(ctx, record("b1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, engine.KindBinding, "b1"); err != nil {
		t.Fatalf("Get through the link after the other Store's insert: %v", err)
	}
}

// TestUnchangedHeaderAfterCommitStopsShortcut: a mapping whose header a
// commit of the Store's own writer leaves as it was is not SQLite's; from
// then on every Get reads the file.
func TestUnchangedHeaderAfterCommitStopsShortcut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	a, b := open(t, path), open(t, path)
	mapped := a.wal
	t.Cleanup(func() { a.wal = mapped }) // released by Close
	// A header that nothing ever writes: consistent and initialized.
	var frozen [walIndexHeaderWords]uint32
	frozen[3], frozen[12+3] = 1, 1 // isInit on little-endian, something on big-endian
	frozen[2], frozen[12+2] = 7, 7
	a.wal = &walIndex{}
	a.wal.words.Store(&frozen)
	if _, ok := a.wal.header(); !ok {
		t.Skip("the frozen header is not taken as initialized on this byte order")
	}
	ctx := t.Context()
	if err := b.Insert(ctx, record("b1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, engine.KindBinding, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Insert(ctx, record("b2")); err != nil { // a commit: the frozen header is found out
		t.Fatal(err)
	}
	r, err := b.Get(ctx, engine.KindBinding, "b1")
	if err != nil {
		t.Fatal(err)
	}
	r.Op.Description = "changed"
	if err := b.Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := a.Get(ctx, engine.KindBinding, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != r.Version {
		t.Fatalf("Get after another Store's write = v%d, want v%d: the frozen header was still relied on", got.Version, r.Version)
	}
}
