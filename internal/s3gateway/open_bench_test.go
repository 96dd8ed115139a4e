package s3gateway

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

var benchOpenUsers = flag.Int("open-users", 10000, "BenchmarkOpenUserStore: users in the IAM directory (1-1,000,000)")

// driverLikeUser stores in st one user as the s3iam driver makes it (path,
// owner tag, a read-write policy on its bucket, one access key) and
// returns its name, id and key id.
func driverLikeUser(ctx context.Context, st storage.Storer, i int) error {
	name, id, key := fmt.Sprintf("bb-binding-%032x", i), fmt.Sprintf("AIDA%016X", i), fmt.Sprintf("AKIA%016X", i)
	bucket := fmt.Sprintf("bb-instance-%032x", i)
	now := time.Date(2026, 12, 1, 12, 0, 0, 123456789, time.UTC)
	if _, err := st.CreateUser(ctx, types.User{
		Path: "/bucketbroker/", UserName: name, UserID: id, CreateDate: now,
		Arn:  "arn:aws:iam::000000000000:user/bucketbroker/" + name,
		Tags: []types.Tag{{Key: "bucketbroker.io/owner", Value: fmt.Sprintf("bucketbroker:binding:%032x", i)}},
	}); err != nil {
		return err
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Sid":"Bucket","Effect":"Allow","Action":["s3:ListBucket","s3:GetBucketLocation","s3:ListBucketMultipartUploads"],"Resource":["arn:aws:s3:::` +
		bucket + `"]},{"Sid":"Objects","Effect":"Allow","Action":["s3:GetObject","s3:PutObject","s3:DeleteObject","s3:AbortMultipartUpload","s3:ListMultipartUploadParts"],"Resource":["arn:aws:s3:::` +
		bucket + `/*"]}]}`
	if err := st.PutUserPolicy(ctx, storage.PutUserPolicyInput{UserName: name, PolicyName: "bucketbroker", PolicyDocument: policy}); err != nil {
		return err
	}
	_, err := st.CreateAccessKey(ctx, storage.CreateAccessKeyInput{
		UserName: name, AccessKeyID: key, SecretAccessKey: strings.Repeat("s", 40), Status: "Active", CreateDate: now,
	})
	return err
}

// writeOldUsers writes n users into the IAM directory dir as userStore
// wrote them before (versitygw's file and its backup in a directory per
// user), quickly: versitygw's own store writes user 0, whose files are
// copied for the others with the name, ids and key changed.
func writeOldUsers(tb testing.TB, dir string, n int) {
	tb.Helper()
	ctx := context.Background()
	tmpl := tb.TempDir()
	st, err := storage.NewInternal(tmpl)
	if err != nil {
		tb.Fatal(err)
	}
	if err := driverLikeUser(ctx, st, 0); err != nil {
		tb.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(tmpl, storeFile))
	if err != nil {
		tb.Fatal(err)
	}
	backup, err := os.ReadFile(filepath.Join(tmpl, backupFile))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, usersDir), 0o700); err != nil {
		tb.Fatal(err)
	}
	zero := fmt.Sprintf("%032x", 0)
	zeroID, zeroKey := fmt.Sprintf("%016X", 0), fmt.Sprintf("%016X", 0)
	err = each(n, runtime.GOMAXPROCS(0), func(i int) error {
		r := strings.NewReplacer(zero, fmt.Sprintf("%032x", i), "AIDA"+zeroID, fmt.Sprintf("AIDA%016X", i), "AKIA"+zeroKey, fmt.Sprintf("AKIA%016X", i))
		udir := filepath.Join(dir, usersDir, "u"+hex.EncodeToString([]byte(fmt.Sprintf("AIDA%016X", i))))
		if err := os.Mkdir(udir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(udir, storeFile), []byte(r.Replace(string(file))), 0o600); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(udir, backupFile), []byte(r.Replace(string(backup))), 0o600)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkOpenUserStore opens an IAM directory of -open-users users, each
// as the s3iam driver makes them (a tag, a policy, a key), as the
// embedded server does at every start, whichever way the last one ended
// (the store keeps no clean-stop file). The directory is written once in
// the older layout (a folder per user), before the timer; s-first-open is
// the first open, which moves the users into the database; the time per
// op is an open (and close) after; heap-B/user is what the open store
// keeps in memory per user; disk-B/user the database's allocated blocks
// per user.
//
//	go test -run '^$' -bench OpenUserStore -benchtime 3x ./internal/s3gateway/ -open-users 100000
func BenchmarkOpenUserStore(b *testing.B) {
	n := *benchOpenUsers
	if n < 1 || n > 1_000_000 {
		b.Fatalf("-open-users %d: want 1 to 1,000,000", n)
	}
	dir := b.TempDir()
	writeOldUsers(b, dir, n)
	ctx := context.Background()
	// The first open migrates the older layout (timed apart).
	t0 := time.Now()
	s, err := newUserStore(ctx, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	firstOpen := time.Since(t0)
	var stored int
	if err := s.readers.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&stored); err != nil || stored != n {
		b.Fatalf("%d users in the database (%v), want %d", stored, err, n)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		s, err := newUserStore(ctx, dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/user")
	b.ReportMetric(firstOpen.Seconds(), "s-first-open")
	b.StopTimer()
	// What the open store holds in memory per user.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err = newUserStore(ctx, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heap-B/user")
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, usersDB), &st); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Blocks*512)/float64(n), "disk-B/user")
}
