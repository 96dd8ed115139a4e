package s3gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
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
		s, err := newUserStore(ctx, dir)
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
	s, err := newUserStore(ctx, dir)
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
