package s3gateway

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

var benchUsers = flag.Int("users", 500, "BenchmarkProvision: bucket + credential pairs to create (1-5000)")

// BenchmarkProvision creates -users buckets, then as many credentials,
// through the s3iam driver, 10 at a time as the controller calls it, then
// revokes the credentials and deletes the buckets, and logs the mean time of
// a driver call in each tenth of each phase: whether a call costs more as
// the number of IAM users grows. Run
// it with -cpuprofile, -blockprofile or -mutexprofile to see where.
//
//	go test -run '^$' -bench Provision -benchtime 1x ./internal/s3gateway/ -users 500
func BenchmarkProvision(b *testing.B) {
	n := *benchUsers
	if n < 1 || n > 5000 {
		b.Fatalf("-users %d: want 1 to 5000", n)
	}
	for range b.N {
		benchProvision(b, n)
	}
}

func benchProvision(b *testing.B, n int) {
	cfg := Config{
		DataDir:       b.TempDir(),
		RootAccessKey: "ROOTBENCH0000000",
		RootSecretKey: "bench-secret-bench-secret-bench-secret",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Stop(context.Background()) }()
	drv, err := s3iam.New(s3iam.Config{
		S3Endpoint: srv.S3Endpoint(), IAMEndpoint: srv.IAMEndpoint(), Region: srv.Region(), PathStyle: true,
		AccessKeyID: cfg.RootAccessKey, SecretAccessKey: cfg.RootSecretKey,
	})
	if err != nil {
		b.Fatal(err)
	}
	name := func(i int) (bucket, user, owner string) {
		id := fmt.Sprintf("bench-%05d", i)
		return driver.BucketName("bb", "claim", id), driver.UserName("bb", "claim", id), driver.OwnerMark("claim", id)
	}
	deciles := func(what string, f func(i int) error) time.Duration {
		var (
			mu    sync.Mutex
			spent = make([]time.Duration, 10)
			count = make([]int, 10)
		)
		start := time.Now()
		err := each(n, 10, func(i int) error {
			t0 := time.Now()
			err := f(i)
			d := time.Since(t0)
			mu.Lock()
			spent[i*10/n] += d
			count[i*10/n]++
			mu.Unlock()
			return err
		})
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		took := time.Since(start)
		line := ""
		for k := range spent {
			if count[k] > 0 {
				line += fmt.Sprintf(" %v", (spent[k] / time.Duration(count[k])).Round(100*time.Microsecond))
			}
		}
		b.Logf("%s %d: %s in all; mean per item by tenth of the run:%s", what, n, took.Round(time.Millisecond), line)
		return took
	}
	b.ResetTimer()
	var create, remove time.Duration
	create += deciles("EnsureBucket", func(i int) error {
		bucket, _, owner := name(i)
		return drv.EnsureBucket(ctx, driver.BucketSpec{Name: bucket, Owner: owner})
	})
	create += deciles("EnsureCredential", func(i int) error {
		bucket, user, owner := name(i)
		_, err := drv.EnsureCredential(ctx, driver.CredentialSpec{UserName: user, Owner: owner, Bucket: bucket, Access: driver.AccessReadWrite})
		return err
	})
	remove += deciles("RevokeCredential", func(i int) error {
		_, user, owner := name(i)
		return drv.RevokeCredential(ctx, user, owner)
	})
	remove += deciles("DeleteBucket", func(i int) error {
		bucket, _, owner := name(i)
		return drv.DeleteBucket(ctx, bucket, owner, true)
	})
	b.StopTimer()
	b.ReportMetric(create.Seconds(), "s-create")
	b.ReportMetric(remove.Seconds(), "s-delete")
	b.ReportMetric(0, "ns/op")
}

// each runs f(0..n-1) on at most workers goroutines and returns the first
// error.
func each(n, workers int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// BenchmarkRepair measures the start-up repair's walk (repair: every
// directory of every bucket is read) over 10 buckets of 10,000 objects
// each, their keys spread over 1,000 directories two levels deep, with
// nothing to repair: what a start pays for the repair as the data grows.
//
//	go test -run '^$' -bench Repair ./internal/s3gateway/
func BenchmarkRepair(b *testing.B) {
	dir := b.TempDir()
	objects, versions := filepath.Join(dir, "objects"), filepath.Join(dir, "versions")
	for bucket := range 10 {
		for d := range 1000 {
			path := filepath.Join(objects, fmt.Sprintf("bucket-%d", bucket), fmt.Sprintf("d%d", d/100), fmt.Sprintf("e%d", d%100))
			if err := os.MkdirAll(path, 0o700); err != nil {
				b.Fatal(err)
			}
			for o := range 10 {
				if err := os.WriteFile(filepath.Join(path, fmt.Sprintf("o%d", o)), nil, 0o600); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := unix.Setxattr(filepath.Join(objects, fmt.Sprintf("bucket-%d", bucket)), bucketACLXattr, []byte("{}"), 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.MkdirAll(versions, 0o700); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	b.ResetTimer()
	for range b.N {
		if err := repair(objects, versions, log); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100_000, "µs/object")
}

// BenchmarkRepairVersions measures the start-up repair over a versioned
// bucket of 10,000 objects, each with one older version in the versions
// folder and its key recorded there (restoreVersion reads each folder
// of versions and its key, and finds the object in place), with nothing
// to repair.
//
//	go test -run '^$' -bench RepairVersions ./internal/s3gateway/
func BenchmarkRepairVersions(b *testing.B) {
	dir := b.TempDir()
	objects, versions := filepath.Join(dir, "objects"), filepath.Join(dir, "versions")
	bucket := filepath.Join(objects, "versioned")
	if err := os.MkdirAll(bucket, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := unix.Setxattr(bucket, bucketACLXattr, []byte("{}"), 0); err != nil {
		b.Fatal(err)
	}
	const keys = 10_000
	for k := range keys {
		key := fmt.Sprintf("o%05d", k)
		if err := os.WriteFile(filepath.Join(bucket, key), nil, 0o600); err != nil {
			b.Fatal(err)
		}
		vdir := versionDir(versions, "versioned", key)
		if err := os.MkdirAll(vdir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, "01M8S2H9R8147XGD6RJZT843DV"), nil, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := recordKey(versions, "versioned", key); err != nil {
			b.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	b.ResetTimer()
	for range b.N {
		if err := repair(objects, versions, log); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/keys, "µs/key")
}

var benchBuckets = flag.Int("repair-buckets", 10000, "BenchmarkRepairEmptyBuckets: buckets (1-1,000,000)")

// BenchmarkRepairEmptyBuckets measures the start-up repair over
// -repair-buckets empty buckets, as the broker makes them (one per
// instance, most of them empty of objects, none versioned): the part of
// the repair that grows with the instances rather than the objects.
//
//	go test -run '^$' -bench RepairEmptyBuckets -benchtime 3x ./internal/s3gateway/ -repair-buckets 100000
func BenchmarkRepairEmptyBuckets(b *testing.B) {
	n := *benchBuckets
	if n < 1 || n > 1_000_000 {
		b.Fatalf("-repair-buckets %d: want 1 to 1,000,000", n)
	}
	dir := b.TempDir()
	objects, versions := filepath.Join(dir, "objects"), filepath.Join(dir, "versions")
	if err := os.MkdirAll(versions, 0o700); err != nil {
		b.Fatal(err)
	}
	err := each(n, runtime.GOMAXPROCS(0), func(i int) error {
		bucket := filepath.Join(objects, fmt.Sprintf("bb-instance-%032x", i))
		if err := os.MkdirAll(bucket, 0o700); err != nil {
			return err
		}
		return unix.Setxattr(bucket, bucketACLXattr, []byte(`{"Owner":"root"}`), 0)
	})
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	b.ResetTimer()
	for range b.N {
		if err := repair(objects, versions, log); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/bucket")
}
