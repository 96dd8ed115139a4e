package main

import (
	"flag"
	"io"
	"path/filepath"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

var (
	adminInstances = flag.Int("admin-instances", 1000, "BenchmarkAdminInstances: instances (one binding each) in the store it lists")
	adminDataDir   = flag.String("admin-data-dir", "", "BenchmarkAdminInstances: list this data dir's store instead, filled with -admin-instances if it has no records (a 100,000-instance fill takes minutes; keep the dir to list it again)")
)

// BenchmarkAdminInstances times `admin instances` (the table, every
// instance) on a store filled through the store's Insert with ready
// bucket instances and one binding each (storetest.Fill):
//
//	go test -run '^$' -bench AdminInstances -benchtime 3x ./cmd/bucketbroker/ -admin-instances 100000 -admin-data-dir /var/tmp/bb-100k
func BenchmarkAdminInstances(b *testing.B) {
	dir := *adminDataDir
	if dir == "" {
		dir = b.TempDir()
	}
	s, err := broker.OpenStore(b.Context(), "", dir)
	if err != nil {
		b.Fatal(err)
	}
	n, err := countInstances(b, s)
	if err == nil && n == 0 {
		err = storetest.Fill(b.Context(), s, *adminInstances)
		n = *adminInstances
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	for _, output := range []string{"table", "json"} {
		b.Run(output, func(b *testing.B) {
			args := []string{"admin", "instances", "--data-dir", filepath.Clean(dir)}
			if output == "json" {
				args = append(args, "-o", "json")
			}
			for b.Loop() {
				cmd := newRootCommand()
				cmd.SetOut(io.Discard)
				cmd.SetErr(io.Discard)
				cmd.SetArgs(args)
				if err := cmd.Execute(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/instance")
		})
	}
}

// countInstances counts the instances in s, a page at a time.
func countInstances(b *testing.B, s engine.Store) (int, error) {
	b.Helper()
	n := 0
	opts := engine.ListOptions{Kind: engine.KindInstance, Limit: listPageSize}
	for {
		page, err := s.List(b.Context(), opts)
		if err != nil {
			return 0, err
		}
		n += len(page)
		if len(page) < listPageSize {
			return n, nil
		}
		opts.After = engine.KeyOf(page[len(page)-1])
	}
}
