package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// keptStore makes a store at path with one record in it, and closes it.
func keptStore(t *testing.T, path string) {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Insert(t.Context(), record("binding-1")); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// files lists the names in dir with their sizes.
func files(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.Size()
	}
	return out
}

// TestOpenRefusesLostDatabase: a database that holds no schema where the
// marker beside it, or the caller's evidence, says that records were kept
// is refused with store.ErrLost, and the refusal changes no file; starting
// over on purpose creates an empty store there. A first Open, with nothing
// to say otherwise, creates the store and its marker.
func TestOpenRefusesLostDatabase(t *testing.T) {
	earlier := errors.New("the data dir holds encryption.key from an earlier start")
	tests := map[string]struct {
		reason string
		// before makes the files: dir is empty, path is the database's.
		before func(t *testing.T, path string)
		opts   store.OpenOptions
		// wantLost: Open fails with ErrLost naming this; "" means it opens.
		wantLost string
	}{
		"first open": {
			reason: "Nothing says that records were kept: the store is created, with its marker.",
			before: func(*testing.T, string) {},
			opts:   store.OpenOptions{Earlier: func() error { return nil }},
		},
		"truncated": {
			reason:   "A database emptied to 0 bytes (a failed restore or copy) with its marker beside it was lost.",
			before:   func(t *testing.T, path string) { keptStore(t, path); truncate(t, path) },
			wantLost: markerSuffix,
		},
		"deleted": {
			reason:   "A missing database with its marker beside it was lost, and is not created again.",
			before:   func(t *testing.T, path string) { keptStore(t, path); remove(t, path) },
			wantLost: markerSuffix,
		},
		"not ours": {
			reason: "A database that has bytes but no schema of ours, with the marker beside it, is refused in the migration, which then changes nothing.",
			before: func(t *testing.T, path string) {
				keptStore(t, path)
				remove(t, path)
				db := rawDB(t, path)
				if _, err := db.ExecContext(t.Context(), `CREATE TABLE other (x)`); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			},
			wantLost: markerSuffix,
		},
		"data dir says so": {
			reason:   "With no marker (a database an older version made, then lost), the caller's evidence refuses too.",
			before:   func(*testing.T, string) {},
			opts:     store.OpenOptions{Earlier: func() error { return earlier }},
			wantLost: earlier.Error(),
		},
		"start over": {
			reason: "Starting over on purpose creates a new, empty store in the lost one's place.",
			before: func(t *testing.T, path string) { keptStore(t, path); truncate(t, path) },
			opts:   store.OpenOptions{StartOver: true, Earlier: func() error { return earlier }},
		},
		"kept": {
			reason: "A database that holds its schema opens whatever the evidence: nothing is lost.",
			before: keptStore,
			opts:   store.OpenOptions{Earlier: func() error { return earlier }},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "bucketbroker.db")
			tc.before(t, path)
			before := files(t, dir)

			s, err := OpenWith(t.Context(), path, tc.opts)
			if tc.wantLost != "" {
				if err == nil {
					_ = s.Close()
					t.Fatalf("Open succeeded, want store.ErrLost\n%s", tc.reason)
				}
				if !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), tc.wantLost) {
					t.Errorf("Open = %v, want store.ErrLost naming %q\n%s", err, tc.wantLost, tc.reason)
				}
				if diff := cmp.Diff(before, files(t, dir)); diff != "" {
					t.Errorf("the refused Open changed the files (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v\n%s", err, tc.reason)
			}
			t.Cleanup(func() { _ = s.Close() })
			if _, err := os.Stat(markerPath(path)); err != nil {
				t.Errorf("no marker beside the open store: %v", err)
			}
			// The store works, and holds what it held.
			_, err = s.Get(t.Context(), engine.KindBinding, "binding-1")
			if kept := name == "kept"; kept != (err == nil) {
				t.Errorf("Get of the record made before: %v (want it found: %v)", err, kept)
			}
			if err := s.Insert(t.Context(), record("binding-2")); err != nil {
				t.Errorf("Insert: %v", err)
			}
		})
	}
}

// TestOpenMarksExistingDatabase: a database with a schema and no marker (a
// crash between the schema's commit and the marker's write, or a marker
// removed by hand) is marked at its next Open, so that losing it later is
// noticed.
func TestOpenMarksExistingDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bucketbroker.db")
	keptStore(t, path)
	remove(t, markerPath(path))
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open without a marker: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	truncate(t, path)
	if s, err = Open(t.Context(), path); !errors.Is(err, store.ErrLost) {
		if err == nil {
			_ = s.Close()
		}
		t.Errorf("Open of the emptied database = %v, want store.ErrLost", err)
	}
}

func truncate(t *testing.T, path string) {
	t.Helper()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
