package s3gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

func openUserStore(t *testing.T, dir string) *userStore {
	t.Helper()
	s, err := newUserStore(context.Background(), dir, nil)
	if err != nil {
		t.Fatalf("newUserStore: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the user store: %v", err)
		}
	})
	return s
}

func newUser(name, id string) types.User {
	return types.User{UserName: name, UserID: id, Path: "/", Arn: "arn:aws:iam::000000000000:user/" + name}
}

func userNames(t *testing.T, s storage.Storer, in storage.ListUsersInput) ([]string, *storage.ListUsersOutput) {
	t.Helper()
	out, err := s.ListUsers(context.Background(), in)
	if err != nil {
		t.Fatalf("ListUsers: %v", err)
	}
	var names []string
	for _, u := range out.Users {
		names = append(names, u.UserName)
	}
	return names, out
}

// TestUserStoreAcrossUsers checks what userStore decides itself, across
// users: names unique regardless of case, user and key ids unique, listing
// and paging in name order, renames, and a reopened store that finds
// everything again.
func TestUserStoreAcrossUsers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openUserStore(t, dir)

	for i, name := range []string{"carol", "Alice", "bob"} {
		if _, err := s.CreateUser(ctx, newUser(name, fmt.Sprintf("AIDA%04d", i))); err != nil {
			t.Fatalf("CreateUser %s: %v", name, err)
		}
	}
	if _, err := s.CreateUser(ctx, newUser("ALICE", "AIDA0100")); iamCode(err) != "EntityAlreadyExists" {
		t.Errorf("CreateUser ALICE while Alice exists: got %v, want EntityAlreadyExists (IAM names are case-insensitive)", err)
	}
	if _, err := s.CreateUser(ctx, newUser("dave", "AIDA0000")); !errors.Is(err, storage.ErrUserIDAlreadyExists) {
		t.Errorf("CreateUser with carol's user id: got %v, want ErrUserIDAlreadyExists", err)
	}
	if _, err := s.GetUser(ctx, "dave"); iamCode(err) != "NoSuchEntity" {
		t.Errorf("GetUser dave after a refused create: got %v, want NoSuchEntity", err)
	}

	key := storage.CreateAccessKeyInput{UserName: "alice", AccessKeyID: "AKIA0001", SecretAccessKey: "s1", Status: "Active", CreateDate: time.Now()}
	if _, err := s.CreateAccessKey(ctx, key); err != nil {
		t.Fatalf("CreateAccessKey: %v", err)
	}
	key.UserName = "bob"
	if _, err := s.CreateAccessKey(ctx, key); !errors.Is(err, storage.ErrAccessKeyIDAlreadyExists) {
		t.Errorf("CreateAccessKey for bob with alice's key id: got %v, want ErrAccessKeyIDAlreadyExists", err)
	}
	if u, err := s.GetUserByAccessKeyID(ctx, "AKIA0001"); err != nil || u.UserName != "Alice" {
		t.Errorf("GetUserByAccessKeyID: got %v, %v; want Alice", u, err)
	}
	if err := s.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: "alice", PolicyName: "p", PolicyDocument: `{"Version":"2012-10-17","Statement":[]}`}); err != nil {
		t.Fatalf("PutUserPolicy: %v", err)
	}
	if err := s.DeleteUser(ctx, "Alice"); iamCode(err) != "DeleteConflict" {
		t.Errorf("DeleteUser with a policy and a key: got %v, want DeleteConflict", err)
	}

	names, out := userNames(t, s, storage.ListUsersInput{MaxItems: 2})
	if diff := cmp.Diff([]string{"Alice", "bob"}, names); diff != "" || !out.IsTruncated || out.Marker != "bob" {
		t.Errorf("ListUsers MaxItems 2: -want +got\n%s (truncated %v, marker %q)", diff, out.IsTruncated, out.Marker)
	}
	names, out = userNames(t, s, storage.ListUsersInput{Marker: "bob"})
	if diff := cmp.Diff([]string{"carol"}, names); diff != "" || out.IsTruncated {
		t.Errorf("ListUsers after bob: -want +got\n%s (truncated %v)", diff, out.IsTruncated)
	}

	if _, err := s.UpdateUser(ctx, storage.UpdateUserInput{UserName: "bob", NewUserName: "CAROL"}); iamCode(err) != "EntityAlreadyExists" {
		t.Errorf("rename bob to CAROL: got %v, want EntityAlreadyExists", err)
	}
	if _, err := s.UpdateUser(ctx, storage.UpdateUserInput{UserName: "bob", NewUserName: "erin"}); err != nil {
		t.Fatalf("rename bob to erin: %v", err)
	}
	if _, err := s.GetUser(ctx, "bob"); iamCode(err) != "NoSuchEntity" {
		t.Errorf("GetUser bob after the rename: got %v, want NoSuchEntity", err)
	}
	if _, err := s.CreateUser(ctx, newUser("bob", "AIDA0200")); err != nil {
		t.Errorf("CreateUser bob after bob was renamed: %v", err)
	}
	if err := s.DeleteUser(ctx, "carol"); err != nil {
		t.Fatalf("DeleteUser carol: %v", err)
	}
	if _, err := s.CreateAccessKey(ctx, storage.CreateAccessKeyInput{UserName: "erin", AccessKeyID: "AKIA0001", Status: "Active"}); !errors.Is(err, storage.ErrAccessKeyIDAlreadyExists) {
		t.Errorf("CreateAccessKey for erin with Alice's key id: got %v, want ErrAccessKeyIDAlreadyExists", err)
	}
	if out, err := s.ListAccessKeys(ctx, storage.ListAccessKeysInput{UserName: "erin"}); err != nil || len(out.AccessKeys) != 0 {
		t.Errorf("erin's keys after the refused key: %+v, %v; want none", out, err)
	}
	r := openUserStore(t, dir)
	names, _ = userNames(t, r, storage.ListUsersInput{})
	if diff := cmp.Diff([]string{"Alice", "bob", "erin"}, names); diff != "" {
		t.Errorf("ListUsers after reopening: -want +got\n%s", diff)
	}
	if u, err := r.GetUserByAccessKeyID(ctx, "AKIA0001"); err != nil || u.UserName != "Alice" {
		t.Errorf("GetUserByAccessKeyID after reopening: got %v, %v; want Alice", u, err)
	}
}

// TestUserStoreKeepsOlderUsers opens an IAM directory written by
// versitygw's own store (every user in iam.json): those users, their keys
// and policies are moved into the database and served, alongside new
// ones, and are not left in iam.json.
func TestUserStoreKeepsOlderUsers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old, err := storage.NewInternal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.CreateUser(ctx, newUser("Legacy", "AIDAOLD1")); err != nil {
		t.Fatal(err)
	}
	if _, err := old.CreateAccessKey(ctx, storage.CreateAccessKeyInput{UserName: "Legacy", AccessKeyID: "AKIAOLD1", SecretAccessKey: "s", Status: "Active"}); err != nil {
		t.Fatal(err)
	}

	s := openUserStore(t, dir)
	if _, err := s.CreateUser(ctx, newUser("legacy", "AIDANEW1")); iamCode(err) != "EntityAlreadyExists" {
		t.Errorf("CreateUser legacy: got %v, want EntityAlreadyExists", err)
	}
	if _, err := s.CreateUser(ctx, newUser("fresh", "AIDAOLD1")); !errors.Is(err, storage.ErrUserIDAlreadyExists) {
		t.Errorf("CreateUser with Legacy's user id: got %v, want ErrUserIDAlreadyExists", err)
	}
	if _, err := s.CreateUser(ctx, newUser("fresh", "AIDANEW2")); err != nil {
		t.Fatal(err)
	}
	if u, err := s.GetUserByAccessKeyID(ctx, "AKIAOLD1"); err != nil || u.UserName != "Legacy" {
		t.Errorf("GetUserByAccessKeyID of the older user's key: got %v, %v", u, err)
	}
	names, _ := userNames(t, s, storage.ListUsersInput{})
	if diff := cmp.Diff([]string{"Legacy", "fresh"}, names); diff != "" {
		t.Errorf("ListUsers: -want +got\n%s", diff)
	}
	if err := s.DeleteAccessKey(ctx, "legacy", "AKIAOLD1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetUserByAccessKeyID(ctx, "AKIAOLD1"); iamCode(err) != "NoSuchEntity" {
		t.Errorf("GetUserByAccessKeyID of a deleted key: got %v, want NoSuchEntity", err)
	}
	if err := s.DeleteUser(ctx, "Legacy"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.GetUser(ctx, "Legacy"); iamCode(err) != "NoSuchEntity" {
		t.Errorf("the older user is still in iam.json after the migration: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, backupFile)); err != nil || strings.Contains(string(b), "AIDAOLD1") {
		t.Errorf("iam.json's backup after the migration: %s, %v; want it without the older user", b, err)
	}
}

// TestUserStoreConcurrentSameName creates, uses and deletes the same few
// names from many goroutines (run with -race): every call ends in success
// or in IAM's own answer for the state it met, and what is left is the
// same when reopened.
func TestUserStoreConcurrentSameName(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openUserStore(t, dir)
	allowed := map[string]bool{"": true, "NoSuchEntity": true, "EntityAlreadyExists": true, "DeleteConflict": true}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				name := fmt.Sprintf("user%d", i%3)
				var err error
				switch (g + i) % 4 {
				case 0:
					_, err = s.CreateUser(ctx, newUser(name, fmt.Sprintf("AIDA%d-%d", g, i)))
				case 1:
					err = s.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: name, PolicyName: "p", PolicyDocument: "{}"})
				case 2:
					_ = s.DeleteUserPolicy(ctx, name, "p")
					err = s.DeleteUser(ctx, name)
				case 3:
					_, err = s.ListUsers(ctx, storage.ListUsersInput{})
				}
				if err != nil && !allowed[iamCode(err)] {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("unexpected errors:\n%s", strings.Join(failed, "\n"))
	}
	names, _ := userNames(t, s, storage.ListUsersInput{})
	r := openUserStore(t, dir)
	again, _ := userNames(t, r, storage.ListUsersInput{})
	if diff := cmp.Diff(names, again); diff != "" {
		t.Errorf("users after reopening differ from before: -before +after\n%s", diff)
	}
}

// TestIAMUsersPersistAcrossRestart goes through the servers: a user's key
// works for its bucket only, still does after a restart, and is refused by
// the very next request once deleted.
func TestIAMUsersPersistAcrossRestart(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir())
	bucket := "scoped-" + randomKey(t)
	first := start(t, cfg)
	rootIAM := iam.New(iam.Options{
		Region: IAMRegion, BaseEndpoint: aws.String(first.IAMEndpoint()), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
	})
	if _, err := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := rootIAM.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String("app")}); err != nil {
		t.Fatal(err)
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::` + bucket + `"]}]}`
	if _, err := rootIAM.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String("app"), PolicyName: aws.String("p"), PolicyDocument: &policy}); err != nil {
		t.Fatal(err)
	}
	key, err := rootIAM.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String("app")})
	if err != nil {
		t.Fatal(err)
	}
	ak, sk := aws.ToString(key.AccessKey.AccessKeyId), aws.ToString(key.AccessKey.SecretAccessKey)
	stop(t, first)

	second := start(t, cfg)
	app := s3Client(second, ak, sk)
	if _, err := app.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket}); err != nil {
		t.Errorf("ListObjectsV2 with the user's key after a restart: %v", err)
	}
	if _, err := app.ListBuckets(ctx, &s3.ListBucketsInput{}); apiCode(err) != "AccessDenied" {
		t.Errorf("ListBuckets with a key scoped to one bucket: got %v, want AccessDenied", err)
	}
	rootIAM = iam.New(iam.Options{
		Region: IAMRegion, BaseEndpoint: aws.String(second.IAMEndpoint()), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
	})
	if _, err := rootIAM.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: aws.String("app"), AccessKeyId: &ak}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket}); apiCode(err) != "InvalidAccessKeyId" {
		t.Errorf("ListObjectsV2 with a deleted key: got %v, want InvalidAccessKeyId", err)
	}
}

// TestUserStoreDropsUnwrittenStores is the state a kill -9 inside the file
// store's first write leaves (found by test/crash TestKillUnderLoad): an
// empty iam.json in a user's directory, or in the IAM directory itself on
// a first start. Both held no user; the store opens, without them, and
// every user that was stored is still there.
func TestUserStoreDropsUnwrittenStores(t *testing.T) {
	dir := t.TempDir()
	s := openUserStore(t, dir)
	if _, err := s.CreateUser(context.Background(), newUser("alice", "AIDA0001")); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, usersDir, "deadbeef")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, storeFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	names, _ := userNames(t, openUserStore(t, dir), storage.ListUsersInput{})
	if diff := cmp.Diff([]string{"alice"}, names); diff != "" {
		t.Errorf("users after reopening (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unwritten user directory is still there: %v", err)
	}

	fresh := t.TempDir()
	if err := os.WriteFile(filepath.Join(fresh, storeFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openUserStore(t, fresh)
	if _, err := s.CreateUser(context.Background(), newUser("bob", "AIDA0002")); err != nil {
		t.Fatalf("create a user after root's unwritten file: %v", err)
	}
}

// writeUserFile writes u into the IAM directory dir as a file of its own,
// as the store before the database did (the indexed line, then the user),
// and returns the file's path.
func writeUserFile(t *testing.T, dir string, u types.User) string {
	t.Helper()
	head, err := json.Marshal(map[string]any{"UserName": u.UserName, "UserID": u.UserID, "Path": u.Path, "AccessKeys": keyIDs(u)})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, usersDir), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, usersDir, "u"+hex.EncodeToString([]byte(u.UserID))+userFileSuffix)
	if err := os.WriteFile(path, append(append(head, '\n'), body...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUserStoreKeepsWrittenStores: in the older layouts, an empty file
// whose backup is not empty was written before (only a crash of the
// machine truncates a renamed file): the store refuses to open and
// removes nothing; so does an emptied user file. A temporary file a
// killed write left (a whole copy of a user, secrets included), of root's
// file or of either older layout, is removed at start.
func TestUserStoreKeepsWrittenStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := writeUserFile(t, dir, newUser("alice", "AIDA0001"))
	old := filepath.Join(dir, usersDir, "uold")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{filepath.Join(dir, storeFile+"123456"), file + tmpSuffix, filepath.Join(old, storeFile+"654321")}
	for _, f := range leftovers {
		if err := os.WriteFile(f, []byte(`{"secret":"x"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := userNames(t, openUserStore(t, dir), storage.ListUsersInput{})
	if diff := cmp.Diff([]string{"alice"}, names); diff != "" {
		t.Errorf("users after reopening (-want +got):\n%s", diff)
	}
	for _, f := range leftovers {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary file %s is still there: %v", f, err)
		}
	}

	// An emptied user file (a crash of the machine; a kill cannot): a
	// refusal, and the file is kept.
	dir = t.TempDir()
	file = writeUserFile(t, dir, newUser("alice", "AIDA0001"))
	if err := os.Truncate(file, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := newUserStore(ctx, dir, nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("newUserStore over an emptied user file = %v, want a refusal", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the refusal removed the emptied file: %v", err)
	}

	dir = t.TempDir()
	writeOldUsers(t, dir, 1)
	udirs, err := filepath.Glob(filepath.Join(dir, usersDir, "*"))
	if err != nil || len(udirs) != 1 {
		t.Fatalf("user folders %v %v, want one", udirs, err)
	}
	if err := os.Truncate(filepath.Join(udirs[0], storeFile), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := newUserStore(ctx, dir, nil); err == nil || !strings.Contains(err.Error(), "is empty but was written before") {
		t.Fatalf("newUserStore over an emptied file with a backup = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(udirs[0], backupFile)); err != nil {
		t.Errorf("the refusal removed the backup: %v", err)
	}
}

// TestUserStoreListAfterDeletedMarker: a user deleted between two pages
// (the page's marker) does not end the listing early.
func TestUserStoreListAfterDeletedMarker(t *testing.T) {
	ctx := context.Background()
	s := openUserStore(t, t.TempDir())
	for i := range 5 {
		if _, err := s.CreateUser(ctx, newUser(fmt.Sprintf("u%d", i), fmt.Sprintf("AIDA%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	first, out := userNames(t, s, storage.ListUsersInput{MaxItems: 2})
	if diff := cmp.Diff([]string{"u0", "u1"}, first); diff != "" || !out.IsTruncated {
		t.Fatalf("first page (-want +got):\n%s truncated=%v", diff, out.IsTruncated)
	}
	if err := s.DeleteUser(ctx, out.Marker); err != nil {
		t.Fatal(err)
	}
	rest, out := userNames(t, s, storage.ListUsersInput{Marker: out.Marker, MaxItems: 10})
	if diff := cmp.Diff([]string{"u2", "u3", "u4"}, rest); diff != "" || out.IsTruncated {
		t.Errorf("page after the deleted marker (-want +got):\n%s truncated=%v", diff, out.IsTruncated)
	}
}

// TestLockDataDir: a second lock on a data directory fails with
// ErrDataDirInUse until the first is released.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second lock = %v, want ErrDataDirInUse", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}

// TestStartReadsNoUser starts the servers on an IAM directory of users:
// the first start moves them from the older layout into the database (and
// says so), and a start after a kill reads none of them, its start-up
// probe included (a listing read every user's); a call for one user then
// reads that user only.
func TestStartReadsNoUser(t *testing.T) {
	const n = 30
	cfg := testConfig(t, t.TempDir())
	writeOldUsers(t, filepath.Join(cfg.DataDir, "iam"), n)
	var logged strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	kill(t, start(t, cfg))
	if !strings.Contains(logged.String(), "Moved the IAM users of the older layout") || !strings.Contains(logged.String(), fmt.Sprintf("users=%d", n)) {
		t.Errorf("the first start's log does not say it migrated %d users:\n%s", n, logged.String())
	}
	before := userReads.Load()
	srv := start(t, cfg)
	if got := userReads.Load() - before; got != 0 {
		t.Errorf("the start read %d users of %d, want none", got, n)
	}
	rootIAM := iam.New(iam.Options{
		Region: IAMRegion, BaseEndpoint: aws.String(srv.IAMEndpoint()), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
	})
	name := fmt.Sprintf("bb-binding-%032x", 7)
	out, err := rootIAM.GetUser(context.Background(), &iam.GetUserInput{UserName: &name})
	if err != nil || aws.ToString(out.User.UserName) != name {
		t.Fatalf("GetUser %s: %v", name, err)
	}
	if got := userReads.Load() - before; got != 1 {
		t.Errorf("after one GetUser %d users were read, want 1", got)
	}
}

// TestListUsersReadsThePage pages through the users as the audit does: a
// page reads its own users only (reading every user's store for each page
// made the audit quadratic), in versitygw's order, with the path prefix
// and the names kept up to date by renames and moves.
func TestListUsersReadsThePage(t *testing.T) {
	const n = 23
	ctx := context.Background()
	dir := t.TempDir()
	writeOldUsers(t, dir, n)
	s := openUserStore(t, dir)
	before := userReads.Load()
	var all []string
	in := storage.ListUsersInput{MaxItems: 5, PathPrefix: "/bucketbroker/"}
	for pages := 1; ; pages++ {
		names, out := userNames(t, s, in)
		all = append(all, names...)
		if got := userReads.Load() - before; got != int64(len(all)) {
			t.Fatalf("after page %d (%d users listed) %d users were read, want as many as listed", pages, len(all), got)
		}
		if !out.IsTruncated {
			break
		}
		in.Marker = out.Marker
	}
	if len(all) != n || !slices.IsSorted(all) {
		t.Errorf("listed %d users (sorted: %v), want %d in order", len(all), slices.IsSorted(all), n)
	}

	// Moves and renames, a new user, and a deleted one.
	first, second := all[0], all[1]
	if _, err := s.UpdateUser(ctx, storage.UpdateUserInput{UserName: first, NewPath: "/elsewhere/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateUser(ctx, storage.UpdateUserInput{UserName: second, NewUserName: "ZZ-renamed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateUser(ctx, storage.UpdateUserInput{UserName: "zz-renamed", NewUserName: "Zz-renamed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx, types.User{UserName: "aa-new", UserID: "AIDANEW", Path: "/bucketbroker/"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUserPolicy(ctx, all[2], "bucketbroker"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAccessKey(ctx, all[2], fmt.Sprintf("AKIA%016X", 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUser(ctx, all[2]); err != nil {
		t.Fatal(err)
	}
	want := append([]string{"Zz-renamed", "aa-new"}, all[3:]...)
	if got, _ := userNames(t, s, storage.ListUsersInput{PathPrefix: "/bucketbroker/"}); !cmp.Equal(got, want) {
		t.Errorf("ListUsers under /bucketbroker/ after the changes:\n%s", cmp.Diff(want, got))
	}
	if got, _ := userNames(t, s, storage.ListUsersInput{PathPrefix: "/else"}); !cmp.Equal(got, []string{first}) {
		t.Errorf("ListUsers under /else: %v, want [%s]", got, first)
	}
	// The same from the database, reopened.
	if got, _ := userNames(t, openUserStore(t, dir), storage.ListUsersInput{PathPrefix: "/bucketbroker/"}); !cmp.Equal(got, want) {
		t.Errorf("ListUsers after reopening:\n%s", cmp.Diff(want, got))
	}
}

// TestListUsersInNameOrder: ListUsers pages through the users in the
// byte order of their stored names, as versitygw's store lists them (not
// the case-folded order of the index that keeps names unique): the
// audit's merge of the users with the broker's records relies on it.
func TestListUsersInNameOrder(t *testing.T) {
	ctx := context.Background()
	s := openUserStore(t, t.TempDir())
	for i, name := range []string{"alice", "Zed", "éclair", "_x", "Bob", "Carl"} {
		if _, err := s.CreateUser(ctx, newUser(name, fmt.Sprintf("AIDA%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	in := storage.ListUsersInput{MaxItems: 2}
	for {
		names, out := userNames(t, s, in)
		all = append(all, names...)
		if !out.IsTruncated {
			break
		}
		in.Marker = out.Marker
	}
	if want := []string{"Bob", "Carl", "Zed", "_x", "alice", "éclair"}; !slices.Equal(all, want) {
		t.Errorf("ListUsers in pages of 2: %v, want %v", all, want)
	}
}
