package s3gateway

import (
	"context"
	"database/sql"
	"encoding/json"
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

// writeUsers stores n users as the s3iam driver makes them
// (driverLikeUser, i from 0 to n-1) in the users database of the IAM
// directory dir, quickly: user 0 is made through the store's calls, the
// others are copies of it with the name, ids and key changed, inserted in
// one transaction.
func writeUsers(tb testing.TB, dir string, n int) {
	tb.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	s, err := newUserStore(ctx, dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	}()
	if err := driverLikeUser(ctx, s, 0); err != nil {
		tb.Fatal(err)
	}
	zero := fmt.Sprintf("%032x", 0)
	u0, err := s.GetUser(ctx, "bb-binding-"+zero)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl, err := json.Marshal(u0)
	if err != nil {
		tb.Fatal(err)
	}
	zeroID := fmt.Sprintf("%016X", 0)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for i := 1; i < n; i++ {
			r := strings.NewReplacer(zero, fmt.Sprintf("%032x", i), "AIDA"+zeroID, fmt.Sprintf("AIDA%016X", i), "AKIA"+zeroID, fmt.Sprintf("AKIA%016X", i))
			var u types.User
			if err := json.Unmarshal([]byte(r.Replace(string(tmpl))), &u); err != nil {
				return err
			}
			if err := insertUser(ctx, tx, u); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkOpenUserStore opens an IAM directory of -open-users users, each
// as the s3iam driver makes them (a tag, a policy, a key), as the
// embedded server does at every start, whichever way the last one ended
// (the store keeps no clean-stop file). The users are written before the
// timer; the time per op is an open (and close); heap-B/user is what the
// open store keeps in memory per user; disk-B/user the database's
// allocated blocks per user.
//
//	go test -run '^$' -bench OpenUserStore -benchtime 3x ./internal/s3gateway/ -open-users 100000
func BenchmarkOpenUserStore(b *testing.B) {
	n := *benchOpenUsers
	if n < 1 || n > 1_000_000 {
		b.Fatalf("-open-users %d: want 1 to 1,000,000", n)
	}
	dir := b.TempDir()
	writeUsers(b, dir, n)
	ctx := context.Background()
	s, err := newUserStore(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	var stored int
	if err := s.readers.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&stored); err != nil || stored != n {
		b.Fatalf("%d users in the database (%v), want %d", stored, err, n)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		s, err := newUserStore(ctx, dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/user")
	b.StopTimer()
	// What the open store holds in memory per user.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err = newUserStore(ctx, dir)
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
