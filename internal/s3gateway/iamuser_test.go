package s3gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

// TestUserStoreAsVersitygw makes the same calls, one user's life, on
// versitygw's own file store and on userStore, and
// requires the same answers: results and errors, limits included.
func TestUserStoreAsVersitygw(t *testing.T) {
	ctx := context.Background()
	theirs, err := storage.NewInternal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ours := openUserStore(t, t.TempDir())
	when := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	policy := func(size int) string {
		return `{"Version":"2012-10-17","Statement":[],"Pad":"` + strings.Repeat("x", size) + `"}`
	}
	type call struct {
		name string
		do   func(storage.Storer) (any, error)
	}
	key := func(user, id string) func(storage.Storer) (any, error) {
		return func(st storage.Storer) (any, error) {
			return st.CreateAccessKey(ctx, storage.CreateAccessKeyInput{UserName: user, AccessKeyID: id, SecretAccessKey: "secret-" + id, Status: "Active", CreateDate: when})
		}
	}
	calls := []call{
		{"create", func(st storage.Storer) (any, error) {
			return st.CreateUser(ctx, types.User{UserName: "Alice", UserID: "AIDA1", Path: "/bucketbroker/", Arn: "arn:aws:iam::000000000000:user/Alice", CreateDate: when})
		}},
		{"create again", func(st storage.Storer) (any, error) {
			return st.CreateUser(ctx, types.User{UserName: "alice", UserID: "AIDA2"})
		}},
		{"get", func(st storage.Storer) (any, error) { return st.GetUser(ctx, "ALICE") }},
		{"get missing", func(st storage.Storer) (any, error) { return st.GetUser(ctx, "bob") }},
		{"tag", func(st storage.Storer) (any, error) {
			return nil, st.TagUser(ctx, "alice", []types.Tag{{Key: "b", Value: "1"}, {Key: "A", Value: "2"}, {Key: "c", Value: "3"}})
		}},
		{"tag replace", func(st storage.Storer) (any, error) {
			return nil, st.TagUser(ctx, "alice", []types.Tag{{Key: "B", Value: "9"}})
		}},
		{"tags page", func(st storage.Storer) (any, error) {
			return st.ListUserTags(ctx, storage.ListUserTagsInput{UserName: "alice", MaxItems: 2})
		}},
		{"tags after", func(st storage.Storer) (any, error) {
			return st.ListUserTags(ctx, storage.ListUserTagsInput{UserName: "alice", Marker: "a"})
		}},
		{"untag", func(st storage.Storer) (any, error) { return nil, st.UntagUser(ctx, "alice", []string{"C", "none"}) }},
		{"tags", func(st storage.Storer) (any, error) {
			return st.ListUserTags(ctx, storage.ListUserTagsInput{UserName: "alice"})
		}},
		{"too many tags", func(st storage.Storer) (any, error) {
			var tags []types.Tag
			for i := range storage.MaxTagsPerResource {
				tags = append(tags, types.Tag{Key: fmt.Sprintf("k%d", i)})
			}
			return nil, st.TagUser(ctx, "alice", tags)
		}},
		{"key 1", key("alice", "AKIA2")},
		{"key 2", key("Alice", "AKIA1")},
		{"key 3", key("alice", "AKIA3")},
		{"key of missing", key("bob", "AKIA4")},
		{"keys", func(st storage.Storer) (any, error) {
			return st.ListAccessKeys(ctx, storage.ListAccessKeysInput{UserName: "alice"})
		}},
		{"keys page", func(st storage.Storer) (any, error) {
			return st.ListAccessKeys(ctx, storage.ListAccessKeysInput{UserName: "alice", MaxItems: 1})
		}},
		{"keys after", func(st storage.Storer) (any, error) {
			return st.ListAccessKeys(ctx, storage.ListAccessKeysInput{UserName: "alice", Marker: "AKIA1"})
		}},
		{"by key", func(st storage.Storer) (any, error) { return st.GetUserByAccessKeyID(ctx, "AKIA1") }},
		{"by missing key", func(st storage.Storer) (any, error) { return st.GetUserByAccessKeyID(ctx, "AKIA9") }},
		{"deactivate", func(st storage.Storer) (any, error) {
			return nil, st.UpdateAccessKey(ctx, storage.UpdateAccessKeyInput{UserName: "alice", AccessKeyID: "AKIA2", Status: "Inactive"})
		}},
		{"deactivate missing", func(st storage.Storer) (any, error) {
			return nil, st.UpdateAccessKey(ctx, storage.UpdateAccessKeyInput{UserName: "alice", AccessKeyID: "AKIA9", Status: "Inactive"})
		}},
		{"used", func(st storage.Storer) (any, error) {
			return nil, st.RecordAccessKeyUsage(ctx, "AKIA1", "s3", "us-east-1", when)
		}},
		{"used again soon", func(st storage.Storer) (any, error) {
			return nil, st.RecordAccessKeyUsage(ctx, "AKIA1", "s3", "us-east-1", when.Add(time.Second))
		}},
		{"last used", func(st storage.Storer) (any, error) { return st.GetAccessKeyLastUsed(ctx, "AKIA1") }},
		{"used elsewhere", func(st storage.Storer) (any, error) {
			return nil, st.RecordAccessKeyUsage(ctx, "AKIA1", "iam", "us-east-1", when.Add(2*time.Second))
		}},
		{"last used after", func(st storage.Storer) (any, error) { return st.GetAccessKeyLastUsed(ctx, "AKIA1") }},
		{"policy b", func(st storage.Storer) (any, error) {
			return nil, st.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: "alice", PolicyName: "b", PolicyDocument: policy(10)})
		}},
		{"policy a", func(st storage.Storer) (any, error) {
			return nil, st.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: "alice", PolicyName: "a", PolicyDocument: policy(20)})
		}},
		{"policy over quota", func(st storage.Storer) (any, error) {
			return nil, st.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: "alice", PolicyName: "c", PolicyDocument: policy(storage.MaxInlinePolicyBytesPerUser)})
		}},
		{"policy replace", func(st storage.Storer) (any, error) {
			return nil, st.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: "alice", PolicyName: "b", PolicyDocument: policy(30)})
		}},
		{"get policy", func(st storage.Storer) (any, error) {
			p, err := st.GetUserPolicy(ctx, "alice", "b")
			if p != nil {
				p.CreateDate, p.UpdateDate = time.Time{}, time.Time{} // set from the clock
			}
			return p, err
		}},
		{"get missing policy", func(st storage.Storer) (any, error) { return st.GetUserPolicy(ctx, "alice", "z") }},
		{"policies page", func(st storage.Storer) (any, error) {
			return st.ListUserPolicies(ctx, storage.ListUserPoliciesInput{UserName: "alice", MaxItems: 1})
		}},
		{"policies after", func(st storage.Storer) (any, error) {
			return st.ListUserPolicies(ctx, storage.ListUserPoliciesInput{UserName: "alice", Marker: "a"})
		}},
		{"delete with policies", func(st storage.Storer) (any, error) { return nil, st.DeleteUser(ctx, "alice") }},
		{"delete policy a", func(st storage.Storer) (any, error) { return nil, st.DeleteUserPolicy(ctx, "alice", "a") }},
		{"delete policy a again", func(st storage.Storer) (any, error) { return nil, st.DeleteUserPolicy(ctx, "alice", "a") }},
		{"delete policy b", func(st storage.Storer) (any, error) { return nil, st.DeleteUserPolicy(ctx, "alice", "b") }},
		{"delete with keys", func(st storage.Storer) (any, error) { return nil, st.DeleteUser(ctx, "alice") }},
		{"move", func(st storage.Storer) (any, error) {
			return st.UpdateUser(ctx, storage.UpdateUserInput{UserName: "alice", NewPath: "/x/", NewArn: "arn:aws:iam::000000000000:user/x/Alice"})
		}},
		{"rename", func(st storage.Storer) (any, error) {
			return st.UpdateUser(ctx, storage.UpdateUserInput{UserName: "alice", NewUserName: "Alicia"})
		}},
		{"key of renamed", func(st storage.Storer) (any, error) { return st.GetUserByAccessKeyID(ctx, "AKIA2") }},
		{"delete key", func(st storage.Storer) (any, error) { return nil, st.DeleteAccessKey(ctx, "alicia", "AKIA1") }},
		{"delete key again", func(st storage.Storer) (any, error) { return nil, st.DeleteAccessKey(ctx, "alicia", "AKIA1") }},
		{"delete other key", func(st storage.Storer) (any, error) { return nil, st.DeleteAccessKey(ctx, "alicia", "AKIA2") }},
		{"delete", func(st storage.Storer) (any, error) { return nil, st.DeleteUser(ctx, "ALICIA") }},
		{"get deleted", func(st storage.Storer) (any, error) { return st.GetUser(ctx, "alicia") }},
		{"list", func(st storage.Storer) (any, error) { return st.ListUsers(ctx, storage.ListUsersInput{}) }},
	}
	for _, c := range calls {
		want, wantErr := c.do(theirs)
		got, gotErr := c.do(ours)
		if !errors.Is(gotErr, wantErr) && fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: error %v, versitygw's store: %v", c.name, gotErr, wantErr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: -versitygw's store +userStore:\n%s", c.name, diff)
		}
	}
}

// olderLayout writes into the IAM directory dir users of every older
// layout at once: in root's iam.json (versitygw's store), in a folder each
// (versitygw's store and its backup), in a file each (the indexed line and
// the user, or the user alone), and the index an older clean stop left.
// It returns the users as they were.
func olderLayout(t *testing.T, dir string) []*types.User {
	t.Helper()
	ctx := context.Background()
	writeOldUsers(t, dir, 3)
	var want []*types.User
	for i := range 3 {
		old, err := storage.NewInternal(filepath.Join(dir, usersDir, "u"+hex.EncodeToString(fmt.Appendf(nil, "AIDA%016X", i))))
		if err != nil {
			t.Fatal(err)
		}
		u, err := old.GetUser(ctx, fmt.Sprintf("bb-binding-%032x", i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, u)
	}
	root, err := storage.NewInternal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := driverLikeUser(ctx, root, 100); err != nil {
		t.Fatal(err)
	}
	u, err := root.GetUser(ctx, fmt.Sprintf("bb-binding-%032x", 100))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, u)
	when := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	two := types.User{UserName: "Two-Lines", UserID: "AIDATWO", Path: "/bucketbroker/", CreateDate: when,
		Tags:       []types.Tag{{Key: "k", Value: "v"}},
		AccessKeys: []types.AccessKeyEntry{{AccessKeyId: "AKIATWO", SecretAccessKey: "s2", Status: "Active", CreateDate: when}},
		Policies:   types.Policies{Inline: []types.PolicyEntry{{PolicyName: "p", PolicyDocument: "{}", CreateDate: when, UpdateDate: when}}}}
	writeUserFile(t, dir, two)
	one := types.User{UserName: "one-line", UserID: "AIDAONE", Path: "/",
		AccessKeys: []types.AccessKeyEntry{{AccessKeyId: "AKIAONE", SecretAccessKey: "s1", Status: "Active"}}}
	b, err := json.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, usersDir, "u"+hex.EncodeToString([]byte(one.UserID))+userFileSuffix), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, oldIndexFile), []byte("bucketbroker IAM index 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(want, &two, &one)
}

// checkMigrated says whether s has exactly the users want, by name and by
// key, and nothing older is left: no users folder, no index, no user in
// root's file.
func checkMigrated(t *testing.T, s *userStore, dir string, want []*types.User) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for _, w := range want {
		names = append(names, w.UserName)
		got, err := s.GetUser(ctx, w.UserName)
		if err != nil {
			t.Errorf("GetUser %s: %v", w.UserName, err)
			continue
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("user %s after the migration (-before +after):\n%s", w.UserName, diff)
		}
		for _, k := range w.AccessKeys {
			if u, err := s.GetUserByAccessKeyID(ctx, k.AccessKeyId); err != nil || u.UserName != w.UserName {
				t.Errorf("GetUserByAccessKeyID %s: %v, %v; want %s", k.AccessKeyId, u, err, w.UserName)
			}
		}
	}
	slices.Sort(names)
	if got, _ := userNames(t, s, storage.ListUsersInput{}); !slices.Equal(got, names) {
		t.Errorf("ListUsers after the migration:\n%s", cmp.Diff(names, got))
	}
	if s.removalDone != nil {
		<-s.removalDone // the moved users' files, removed in the background
	}
	for _, left := range []string{filepath.Join(dir, usersDir), filepath.Join(dir, oldIndexFile), filepath.Join(dir, movedDir)} {
		if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the migration (%v)", left, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, storeFile))
	if err != nil || strings.Contains(string(b), "AIDA") {
		t.Errorf("root's %s after the migration: %s (%v); want no user", storeFile, b, err)
	}
}

// TestMigrateOlderLayout: every user of every older layout is in the
// database after the first open, with its keys, tags and policies as they
// were, and nothing older is left; a second open finds the same.
func TestMigrateOlderLayout(t *testing.T) {
	dir := t.TempDir()
	want := olderLayout(t, dir)
	s := openUserStore(t, dir)
	if s.migrated != len(want) {
		t.Errorf("the open says it moved %d users, want %d", s.migrated, len(want))
	}
	checkMigrated(t, s, dir, want)
	r := openUserStore(t, dir)
	if r.migrated != 0 {
		t.Errorf("the second open moved %d users, want none", r.migrated)
	}
	checkMigrated(t, r, dir, want)
}

// TestMigrateFolderAndFileOfOneUser: the layout before the database
// migrated a user's folder into a file of its own, writing the file and
// then removing the folder; a kill in between left both. They are one
// user: the start moves it once and removes both.
func TestMigrateFolderAndFileOfOneUser(t *testing.T) {
	dir := t.TempDir()
	want := olderLayout(t, dir)
	folder := filepath.Join(dir, usersDir, "u"+hex.EncodeToString(fmt.Appendf(nil, "AIDA%016X", 0)))
	writeUserFile(t, dir, *want[0])
	if _, err := os.Stat(folder + userFileSuffix); err != nil {
		t.Fatalf("the user's file was not written where its folder's migration would: %v", err)
	}
	s := openUserStore(t, dir)
	if s.migrated != len(want) {
		t.Errorf("the open says it moved %d users, want %d", s.migrated, len(want))
	}
	checkMigrated(t, s, dir, want)
}

// TestMigrateKilled kills (simulated) the migration at each of its steps:
// inside its transaction, after the users are durable in the database and
// before anything older is removed, after root's file is rewritten and
// before the users folder is renamed out of the way, and part way through
// the removal of the renamed folder (in the background, after the open).
// The next open moves what is left again, or goes on with the removal,
// and loses nothing.
func TestMigrateKilled(t *testing.T) {
	for _, step := range []string{"commit", "durable", "rename", "removing"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			want := olderLayout(t, dir)
			killMigration = func(at string) bool { return at == step }
			s, err := newUserStore(context.Background(), dir, nil)
			if step == "removing" {
				if err != nil {
					t.Fatal(err)
				}
				<-s.removalDone
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if left, err := os.ReadDir(filepath.Join(dir, movedDir)); len(left) == 0 {
					t.Fatalf("the removal killed part way left nothing in %s (%v)", movedDir, err)
				}
			} else if !errors.Is(err, errKilled) {
				t.Fatalf("the open killed at %s: %v", step, err)
			}
			killMigration = nil
			checkMigrated(t, openUserStore(t, dir), dir, want)
		})
	}
}

// killWriterEnv names the IAM directory TestUserStoreKillMidWrite's child
// writes to; the child is this test binary running the test again.
const killWriterEnv = "BUCKETBROKER_TEST_IAM_KILL_WRITER"

// TestUserStoreKillMidWrite kills (SIGKILL) a process that changes users
// as fast as it can (a user, its policy, its key, its tag: four
// transactions each), after it reported 40 more users done, at whatever
// point it then is, five times on one database, each process going on
// after the users there (one it left half made stays so): after each kill
// the database opens, passes SQLite's integrity check, every user any of
// them reported done is whole, and the index of access keys agrees with
// the users' rows.
func TestUserStoreKillMidWrite(t *testing.T) {
	ctx := context.Background()
	if dir := os.Getenv(killWriterEnv); dir != "" {
		s, err := newUserStore(ctx, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		var from int
		if err := s.readers.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&from); err != nil {
			t.Fatal(err)
		}
		for i := from; ; i++ {
			if err := driverLikeUser(ctx, s, i); err != nil {
				t.Fatal(err)
			}
			if err := s.TagUser(ctx, fmt.Sprintf("bb-binding-%032x", i), []types.Tag{{Key: "done", Value: "yes"}}); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("done %d\n", i)
		}
	}
	dir := t.TempDir()
	var done []int
	for round := range 5 {
		done = append(done, killWriter(t, dir, 40)...)
		checkAfterKill(t, dir, done)
		t.Logf("kill %d: after %d users reported done", round+1, len(done))
	}
}

// killWriter starts TestUserStoreKillMidWrite's child on dir, kills it
// once it reported n users done, and returns them.
func killWriter(t *testing.T, dir string, n int) []int {
	t.Helper()
	c := startTestChild(t, "TestUserStoreKillMidWrite", killWriterEnv+"="+dir)
	var done []int
	for len(done) < n {
		line, ok := <-c.lines
		if !ok {
			break
		}
		var i int
		if _, err := fmt.Sscanf(line, "done %d", &i); err == nil {
			done = append(done, i)
		}
	}
	c.kill(t)
	if len(done) < n {
		t.Fatalf("the writer stopped after %d users, before %d", len(done), n)
	}
	return done
}

// checkAfterKill opens dir after a kill: the database is whole, the users
// done are, and the key index agrees with the rows.
func checkAfterKill(t *testing.T, dir string, done []int) {
	t.Helper()
	ctx := context.Background()
	s, err := newUserStore(ctx, dir, nil)
	if err != nil {
		t.Fatalf("open after the kill: %v", err)
	}
	defer s.Close()
	var check string
	if err := s.readers.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity check after the kill: %q, %v", check, err)
	}
	for _, i := range done {
		name := fmt.Sprintf("bb-binding-%032x", i)
		u, err := s.GetUserByAccessKeyID(ctx, fmt.Sprintf("AKIA%016X", i))
		if err != nil || u.UserName != name || len(u.Policies.Inline) != 1 || len(u.Tags) != 2 {
			t.Errorf("user %d, reported done before the kill: %+v, %v", i, u, err)
		}
	}
	all, err := s.ListUsers(ctx, storage.ListUsersInput{})
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	for _, u := range all.Users {
		for _, k := range u.AccessKeys {
			keys++
			if got, err := s.GetUserByAccessKeyID(ctx, k.AccessKeyId); err != nil || got.UserName != u.UserName {
				t.Errorf("key %s of %s: the index says %v, %v", k.AccessKeyId, u.UserName, got, err)
			}
		}
	}
	var indexed int
	if err := s.readers.QueryRowContext(ctx, `SELECT count(*) FROM access_keys`).Scan(&indexed); err != nil || indexed != keys {
		t.Errorf("%d access keys indexed (%v), %d in the users' rows", indexed, err, keys)
	}
}
