package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

var (
	adminInstances = flag.Int("admin-instances", 1000, "BenchmarkAdminInstances: instances (one binding each) in the store it lists")
	adminDataDir   = flag.String("admin-data-dir", "", "BenchmarkAdminInstances: list this data dir's store instead, filled with -admin-instances if it has no records (a 100,000-instance fill takes minutes; keep the dir to list it again)")
)

// BenchmarkAdminInstances times `admin instances` (the table, every
// instance) on a store filled through the store's Insert with ready
// bucket instances and one binding each (fillStore):
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
		err = fillStore(b.Context(), s, *adminInstances)
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

// countInstances counts the instances in s.
func countInstances(b *testing.B, s engine.Store) (int, error) {
	b.Helper()
	n := 0
	err := eachRecord(b.Context(), s, engine.ListOptions{Kind: engine.KindInstance}, func(*engine.Record) error {
		n++
		return nil
	})
	return n, err
}

// fillStore inserts n ready bucket instances with one ready binding each, as
// the bucket backend leaves them after a provision and a bind (names,
// owner marks, a sealed secret of a real one's size), through s's Insert:
// a store the size of a scale run's without running one. Every hundredth
// instance's provision is still in progress, started an hour ago with its
// deadline passed.
func fillStore(ctx context.Context, s engine.Store, n int) error {
	const service, plan = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01", "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	started := time.Now().UTC().Add(-time.Hour)
	for i := range n {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		bucket := driver.BucketName("bb", "instance", id)
		inst := &engine.Record{Kind: engine.KindInstance, ID: id, Fingerprint: "sha256:" + id,
			Request: engine.Request{ServiceID: service, PlanID: plan, OrganizationGUID: "org-1", SpaceGUID: "space-1"},
			Phase:   engine.PhaseReady,
			Op: engine.Operation{ID: "op-p-" + id, Type: engine.OpProvision, State: engine.OpSucceeded, Description: "provision succeeded",
				StartedAt: started, Deadline: started.Add(time.Hour), EndedAt: started.Add(time.Second)},
			Backend: "bucket",
			Bucket:  &engine.BucketState{Bucket: bucket, Owner: driver.OwnerMark("instance", id), BucketAttempted: true, BucketCreated: true},
		}
		if i%100 == 99 {
			inst.Phase = engine.PhaseProvisioning
			inst.Op.State, inst.Op.Description, inst.Op.EndedAt = engine.OpInProgress, "provision in progress", time.Time{}
			inst.Bucket.BucketCreated = false
		}
		if err := s.Insert(ctx, inst); err != nil {
			return err
		}
		bid := fmt.Sprintf("%08d-0000-4000-8000-000000000001", i)
		sealed := make([]byte, 68)
		_, _ = rand.Read(sealed)
		bind := &engine.Record{Kind: engine.KindBinding, ID: bid, InstanceID: id, Fingerprint: "sha256:" + bid,
			Request: engine.Request{ServiceID: service, PlanID: plan, AppGUID: "app-1"},
			Phase:   engine.PhaseReady,
			Op: engine.Operation{ID: "op-b-" + bid, Type: engine.OpBind, State: engine.OpSucceeded, Description: "bind succeeded",
				StartedAt: started, Deadline: started.Add(time.Hour), EndedAt: started.Add(time.Second)},
			Backend: "bucket",
			Bucket: &engine.BucketState{Bucket: bucket, Owner: driver.OwnerMark("binding", bid), UserName: driver.UserName("bb", "binding", bid),
				UserCreated: true, Access: "read-write", AccessKeyID: fmt.Sprintf("BBKEY%015d", i)},
			SealedSecret: sealed,
		}
		if err := s.Insert(ctx, bind); err != nil {
			return err
		}
	}
	return nil
}
