package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Bench measures a Store's inserts, reads and updates, alone and under
// concurrency, so that stores can be compared in one run (benchstat).
func Bench(b *testing.B, s engine.Store) {
	ctx := b.Context()
	var ids atomic.Int64 // unique across the runs the benchmark framework makes
	next := func(prefix string) *engine.Record { return benchRecord(fmt.Sprintf("%s-%d", prefix, ids.Add(1))) }
	b.Run("Insert", func(b *testing.B) {
		for b.Loop() {
			benchOK(b, s.Insert(ctx, next("insert")))
		}
	})
	benchOK(b, s.Insert(ctx, benchRecord("get")))
	b.Run("InsertParallel", func(b *testing.B) {
		b.SetParallelism(50) // many requests at once, as under a burst of provisions
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchOK(b, s.Insert(ctx, next("parallel")))
			}
		})
	})
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			benchOK(b, getBinding(ctx, s, "get"))
		}
	})
	b.Run("GetParallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchOK(b, getBinding(ctx, s, "get"))
			}
		})
	})
	b.Run("GetDuringInserts", func(b *testing.B) { benchGetDuringInserts(ctx, b, s, next) })
	b.Run("UpdateParallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			r := next("update")
			benchOK(b, s.Insert(ctx, r))
			for pb.Next() {
				benchOK(b, s.Update(ctx, r))
				benchOK(b, getBinding(ctx, s, r.ID))
			}
		})
	})
}

// benchGetDuringInserts measures reads while a steady stream of writes
// waits for fsync: with a separate reader pool they do not queue behind
// the writes.
func benchGetDuringInserts(ctx context.Context, b *testing.B, s engine.Store, next func(string) *engine.Record) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Insert(ctx, next("background")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchOK(b, getBinding(ctx, s, "get"))
		}
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
}

// benchOK fails the benchmark on a store error.
func benchOK(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// getBinding reads the binding record id.
func getBinding(ctx context.Context, s engine.Store, id string) error {
	_, err := s.Get(ctx, engine.KindBinding, id)
	return err
}

func benchRecord(id string) *engine.Record {
	return &engine.Record{
		Kind:         engine.KindBinding,
		ID:           id,
		InstanceID:   "instance-1",
		Fingerprint:  "fp",
		Phase:        engine.PhaseProvisioning,
		Op:           engine.Operation{ID: "op-1", Type: engine.OpBind, State: engine.OpInProgress},
		SealedSecret: []byte{1, 2, 3},
	}
}
