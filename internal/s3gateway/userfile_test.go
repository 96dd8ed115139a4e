package s3gateway

import (
	"context"
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

// TestUserFileAsVersitygw makes the same calls, one user's life, on
// versitygw's own file store and on userStore (a userFile per user), and
// requires the same answers: results and errors, limits included.
func TestUserFileAsVersitygw(t *testing.T) {
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

// TestUserFileTornWrites kills (simulated) a write of a user's file at
// every length of what reached the temporary file, and before the rename
// with all of it: the user's file is always the state before the change,
// whole, and the store opens with it and without the temporary file. The
// write only ever replaces the user's file by a rename of a file written
// to the end.
func TestUserFileTornWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openUserStore(t, dir)
	if _, err := s.CreateUser(ctx, newUser("alice", "AIDA0001")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, usersDir, userFileName("AIDA0001"))
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	change := storage.PutUserPolicyInput{UserName: "alice", PolicyName: "p", PolicyDocument: `{"Version":"2012-10-17","Statement":[]}`}
	var size int
	killWrite = func(b []byte) (int, bool) { size = len(b); return 0, false }
	t.Cleanup(func() { killWrite = nil })
	if err := s.PutUserPolicy(ctx, change); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUserPolicy(ctx, "alice", "p"); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(file); err != nil || len(got) != len(before) {
		t.Fatalf("the file after putting and deleting a policy: %d bytes (%v), want %d", len(got), err, len(before))
	}
	for keep := 0; keep <= size; keep++ {
		killWrite = func(b []byte) (int, bool) { return keep, true }
		if err := s.PutUserPolicy(ctx, change); !errors.Is(err, errKilled) {
			t.Fatalf("PutUserPolicy killed after %d bytes: %v", keep, err)
		}
		killWrite = nil
		if got, err := os.ReadFile(file); err != nil || string(got) != string(before) {
			t.Fatalf("killed after %d of %d bytes: the user's file is %q (%v), want it unchanged", keep, size, got, err)
		}
		r := openUserStore(t, dir)
		if _, err := r.GetUserPolicy(ctx, "alice", "p"); iamCode(err) != "NoSuchEntity" {
			t.Fatalf("killed after %d of %d bytes, reopened: the policy is %v, want none", keep, size, err)
		}
		if _, err := os.Stat(file + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("killed after %d bytes: the temporary file is still there after reopening: %v", keep, err)
		}
	}
	// Not killed: the change is whole in the file.
	if err := s.PutUserPolicy(ctx, change); err != nil {
		t.Fatal(err)
	}
	if _, err := openUserStore(t, dir).GetUserPolicy(ctx, "alice", "p"); err != nil {
		t.Errorf("the policy after a write that completed, reopened: %v", err)
	}
}

// TestMigrateOlderLayout opens an IAM directory written before userFile
// (versitygw's store and its backup in a folder per user): every user is
// there after, with its keys, tags and policies as they were, one file
// each of at most 2 KB (a user as the driver makes it), the folders gone.
// A start killed between writing a user's file and removing its folder
// finds both: the file is written again from the folder, not counted as a
// second user.
func TestMigrateOlderLayout(t *testing.T) {
	const n = 5
	ctx := context.Background()
	dir := t.TempDir()
	writeOldUsers(t, dir, n)
	var want []*types.User
	for i := range n {
		old, err := storage.NewInternal(filepath.Join(dir, usersDir, "u"+fmt.Sprintf("%x", fmt.Sprintf("AIDA%016X", i))))
		if err != nil {
			t.Fatal(err)
		}
		u, err := old.GetUser(ctx, fmt.Sprintf("bb-binding-%032x", i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, u)
	}
	// A killed migration: user 0's file written, its folder still there.
	b, err := json.Marshal(want[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, usersDir, userFileName(want[0].UserID)), b, 0o600); err != nil {
		t.Fatal(err)
	}

	s := openUserStore(t, dir)
	for _, w := range want {
		got, err := s.GetUser(ctx, w.UserName)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("user %s after the migration (-before +after):\n%s", w.UserName, diff)
		}
		if u, err := s.GetUserByAccessKeyID(ctx, w.AccessKeys[0].AccessKeyId); err != nil || u.UserName != w.UserName {
			t.Errorf("GetUserByAccessKeyID %s: %v, %v", w.AccessKeys[0].AccessKeyId, u, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, usersDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name())
		if e.IsDir() || !strings.HasSuffix(e.Name(), userFileSuffix) || info.Size() > 2048 {
			t.Errorf("users folder holds %s (folder %v, %d bytes), want files of at most 2 KB", e.Name(), e.IsDir(), info.Size())
		}
	}
	if len(names) != n {
		t.Errorf("users folder holds %v, want %d files", names, n)
	}
	// Reopened as is: the same users.
	got, _ := userNames(t, openUserStore(t, dir), storage.ListUsersInput{})
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.UserName)
	}
	slices.Sort(wantNames)
	if diff := cmp.Diff(wantNames, got); diff != "" {
		t.Errorf("users after reopening (-want +got):\n%s", diff)
	}
}

// TestUserFileLines: a user's file is the indexed line and the user; the
// start indexes from the first line only, and a file of the user alone
// (one line) opens as well.
func TestUserFileLines(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openUserStore(t, dir)
	if _, err := s.CreateUser(ctx, newUser("alice", "AIDA0001")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAccessKey(ctx, storage.CreateAccessKeyInput{UserName: "alice", AccessKeyID: "AKIA0001", SecretAccessKey: "s", Status: "Active"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, usersDir, userFileName("AIDA0001")))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "secret") || !strings.Contains(lines[0], "AKIA0001") || !strings.Contains(lines[1], `"SecretAccessKey":"s"`) {
		t.Errorf("the user's file is\n%s\nwant the names and key ids on one line, then the user", b)
	}
	bob, err := json.Marshal(types.User{UserName: "bob", UserID: "AIDA0002", Path: "/", AccessKeys: []types.AccessKeyEntry{{AccessKeyId: "AKIA0002", SecretAccessKey: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, usersDir, userFileName("AIDA0002")), bob, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openUserStore(t, dir)
	for key, want := range map[string]string{"AKIA0001": "alice", "AKIA0002": "bob"} {
		if u, err := r.GetUserByAccessKeyID(ctx, key); err != nil || u.UserName != want {
			t.Errorf("GetUserByAccessKeyID %s after reopening: %v, %v; want %s", key, u, err, want)
		}
	}
}
