package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// markerSuffix names the marker beside a database file: bucketbroker.db
// has bucketbroker.db.created.
const markerSuffix = ".created"

// markerPath is the marker of the database file at path.
func markerPath(path string) string { return path + markerSuffix }

// markerSays returns an error naming the marker of the database at path,
// which says that the database held a schema (records) before, or nil
// when there is none.
func markerSays(path string) error {
	m := markerPath(path)
	fi, err := os.Stat(m)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		// It is there, but cannot be read: it says as much as one that can.
		return fmt.Errorf("marker %s says the database held records (%w)", m, err)
	}
	return fmt.Errorf("marker %s says the database held records (marked %s)", m, fi.ModTime().UTC().Format(time.RFC3339))
}

// emptyFile reports whether the database at path has no bytes: its file
// and its write-ahead log are each missing or empty. (A database in use
// may have all its pages in the log, none yet in its file.)
func emptyFile(path string) bool {
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > 0 {
			return false
		}
	}
	return true
}

// writeMarker writes the marker of the database at path, which holds a
// schema now, unless it is there already. It is written with its
// directory synced: a database that survives a crash keeps its marker.
func writeMarker(path string) error {
	m := markerPath(path)
	if _, err := os.Stat(m); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	text := fmt.Sprintf("bucketbroker keeps its records in the SQLite database %s beside this file (marked %s).\n"+
		"While this file exists, bucketbroker refuses to open that database empty or missing: it was lost.\n",
		filepath.Base(path), time.Now().UTC().Format(time.RFC3339))
	tmp := m + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := os.Rename(tmp, m); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := syncFile(filepath.Dir(m)); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	return nil
}

// syncFile flushes the file or directory at path to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
