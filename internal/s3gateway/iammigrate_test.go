package s3gateway

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/versity/versitygw/iamapi/types"
)

// TestMigrateRefusesDuplicates: a name (case-folded), a user id or an
// access key found twice, among the older users or between them and the
// users already in the database (a hand edit), is refused with an error
// that names both places, and nothing changes: the database holds what it
// held, the older files are all there.
func TestMigrateRefusesDuplicates(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) // before the open that fails
		want  string
		users int // in the database after it
	}{
		{"name twice among the older users", func(t *testing.T, dir string) {
			olderLayout(t, dir)
			writeUserFile(t, dir, newUser("ONE-LINE", "AIDAOTHER"))
		}, `user "one-line" is stored twice (`, 0},
		{"key twice among the older users", func(t *testing.T, dir string) {
			olderLayout(t, dir)
			u := newUser("third", "AIDATHIRD")
			u.AccessKeys = append(u.AccessKeys, types.AccessKeyEntry{AccessKeyId: "AKIATWO", SecretAccessKey: "s", Status: "Active"})
			writeUserFile(t, dir, u)
		}, `access key "AKIATWO" is stored twice (`, 0},
		{"name in the database already", func(t *testing.T, dir string) {
			s := openUserStore(t, dir)
			if _, err := s.CreateUser(context.Background(), newUser("Legacy", "AIDAONE")); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			olderLayout(t, dir)
			writeUserFile(t, dir, newUser("legacy", "AIDALEGACY"))
		}, `a user named "legacy" is in users.db already`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			before := snapshotOlder(t, dir)
			_, err := newUserStore(context.Background(), dir, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the open: %v; want an error with %q", err, c.want)
			}
			if after := snapshotOlder(t, dir); !slices.Equal(before, after) {
				t.Errorf("the older files after the refused migration:\n%q\nwant as before:\n%q", after, before)
			}
			if n := countUsers(t, dir); n != c.users {
				t.Errorf("%d users in the database after the refused migration, want %d", n, c.users)
			}
		})
	}
}

// snapshotOlder lists the older layout's files under the IAM directory
// dir with their contents (root's file and the users folder).
func snapshotOlder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), usersDB) {
			return err
		}
		b, err := os.ReadFile(path)
		out = append(out, path+" "+string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countUsers counts the rows of the users database in dir, read directly.
func countUsers(t *testing.T, dir string) int {
	t.Helper()
	db, err := sql.Open("sqlite", usersDSN(filepath.Join(dir, usersDB), true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateLogsProgress: the migration says when it starts (how many
// sources), how far it is while it runs (every step here: the interval is
// zero), and when it ends (how many users, how long), then when the
// removal of the older files it left to the background ends, with the
// package's log keys.
func TestMigrateLogsProgress(t *testing.T) {
	dir := t.TempDir()
	want := olderLayout(t, dir)
	every := migrateProgressEvery
	migrateProgressEvery = 0
	t.Cleanup(func() { migrateProgressEvery = every })
	var buf bytes.Buffer
	s, err := newUserStore(context.Background(), dir, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	<-s.removalDone
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %s: %v", l, err)
		}
		lines = append(lines, m)
	}
	// olderLayout: 3 folders and 2 files of a user each, 1 user in root's file.
	if len(lines) < 3 {
		t.Fatalf("%d log lines, want a start, progress and an end:\n%s", len(lines), buf.String())
	}
	// The last: the removal of the moved files, in the background.
	first, last, removed := lines[0], lines[len(lines)-2], lines[len(lines)-1]
	if first["sources"] != 5.0 || first["root_users"] != 1.0 {
		t.Errorf("the start's line: %v; want sources 5, root_users 1", first)
	}
	if !slices.ContainsFunc(lines[1:len(lines)-2], func(m map[string]any) bool {
		return m["moved"] == 5.0 && m["sources"] == 5.0 && m["took"] != nil
	}) {
		t.Errorf("no progress line with moved 5 of sources 5:\n%s", buf.String())
	}
	if last["msg"] != "Moved the IAM users of the older layout into the users database" || last["users"] != float64(len(want)) || last["took"] == nil {
		t.Errorf("the end's line: %v; want users %d and took", last, len(want))
	}
	if removed["msg"] != "Removed the files of the IAM users moved into the users database" || removed["entries"] != 5.0 {
		t.Errorf("the removal's line: %v; want entries 5", removed)
	}
	// A start with nothing to move says nothing.
	buf.Reset()
	s, err = newUserStore(context.Background(), dir, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("a start with nothing to move logged:\n%s", buf.String())
	}
}
