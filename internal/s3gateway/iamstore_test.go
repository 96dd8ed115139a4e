package s3gateway

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

func openUserStore(t *testing.T, dir string) *userStore {
	t.Helper()
	s, err := newUserStore(context.Background(), dir)
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

// TestUserStoreRefusesUsersElsewhere: an IAM directory with users that
// are not in the database (in root's iam.json, as versitygw's own store
// keeps them, or in a users folder, or beside an index of user files) is
// refused with an error that names where they are, and nothing in it is
// changed: serving it would answer as if they did not exist.
func TestUserStoreRefusesUsersElsewhere(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"users in iam.json", func(t *testing.T, dir string) {
			root, err := storage.NewInternal(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := root.CreateUser(ctx, newUser("alice", "AIDA0001")); err != nil {
				t.Fatal(err)
			}
		}, storeFile + ": 1 user(s)"},
		{"a users folder", func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, usersDir, "u41494441"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, "(" + usersDir + ")"},
		{"an index of user files", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, oldIndexFile), []byte("bucketbroker IAM index 1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "(" + oldIndexFile + ")"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			before := dirContents(t, dir)
			s, err := newUserStore(ctx, dir)
			if err == nil {
				_ = s.Close()
				t.Fatal("the open succeeded, want a refusal")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "refusing to start without them") {
				t.Errorf("the open: %v; want an error with %q", err, c.want)
			}
			if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
				t.Errorf("the refused open changed the IAM directory (-before +after):\n%s", diff)
			}
		})
	}

	// A directory this store wrote (root's file holds no user) opens.
	dir := t.TempDir()
	s := openUserStore(t, dir)
	if _, err := s.CreateUser(ctx, newUser("bob", "AIDA0002")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, storeFile)); err == nil && strings.Contains(string(b), "AIDA0002") {
		t.Errorf("a user was written into %s: %s", storeFile, b)
	}
	names, _ := userNames(t, openUserStore(t, dir), storage.ListUsersInput{})
	if diff := cmp.Diff([]string{"bob"}, names); diff != "" {
		t.Errorf("users after reopening (-want +got):\n%s", diff)
	}
}

// dirContents maps every file under dir to its content, and every folder
// to "dir".
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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
	rootIAM := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
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
	rootIAM = iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
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
// empty iam.json, with no backup, in the IAM directory on a first start.
// It held nothing: the store opens, and writes it anew.
func TestUserStoreDropsUnwrittenStores(t *testing.T) {
	fresh := t.TempDir()
	if err := os.WriteFile(filepath.Join(fresh, storeFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openUserStore(t, fresh)
	if _, err := s.CreateUser(context.Background(), newUser("bob", "AIDA0002")); err != nil {
		t.Fatalf("create a user after root's unwritten file: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(fresh, storeFile)); err != nil || fi.Size() == 0 {
		t.Errorf("root's %s after the open: %v, %v; want it written anew", storeFile, fi, err)
	}
}

// TestUserStoreKeepsWrittenStores: an empty iam.json whose backup is not
// empty held something (only a crash of the machine truncates a renamed
// file): the store refuses to open and removes nothing. A temporary file
// a killed write of root's file left (a whole copy of it) is removed at
// start.
func TestUserStoreKeepsWrittenStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	openUserStore(t, dir)
	leftover := filepath.Join(dir, storeFile+"123456")
	if err := os.WriteFile(leftover, []byte(`{"secret":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	openUserStore(t, dir)
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file %s is still there: %v", leftover, err)
	}

	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, storeFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, backupFile), []byte(`{"roles":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newUserStore(ctx, dir); err == nil || !strings.Contains(err.Error(), "is empty but was written before") {
		t.Fatalf("newUserStore over an emptied file with a backup = %v, want a refusal", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, backupFile)); err != nil || len(b) == 0 {
		t.Errorf("the refusal changed the backup: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, storeFile)); err != nil {
		t.Errorf("the refusal removed the emptied file: %v", err)
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
// a start after a kill reads none of them, its start-up probe included (a
// listing would read every user); a call for one user then reads that
// user only.
func TestStartReadsNoUser(t *testing.T) {
	const n = 30
	cfg := testConfig(t, t.TempDir())
	writeUsers(t, filepath.Join(cfg.DataDir, "iam"), n)
	kill(t, start(t, cfg))
	before := userReads.Load()
	srv := start(t, cfg)
	if got := userReads.Load() - before; got != 0 {
		t.Errorf("the start read %d users of %d, want none", got, n)
	}
	rootIAM := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
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
	writeUsers(t, dir, n)
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
