package storetest

import (
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
	b.Run("Insert", func(b *testing.B) {
		for b.Loop() {
			if err := s.Insert(ctx, benchRecord(fmt.Sprintf("insert-%d", ids.Add(1)))); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := s.Insert(ctx, benchRecord("get")); err != nil {
		b.Fatal(err)
	}
	b.Run("InsertParallel", func(b *testing.B) {
		b.SetParallelism(50) // many requests at once, as under a burst of provisions
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Insert(ctx, benchRecord(fmt.Sprintf("parallel-%d", ids.Add(1)))); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Get(ctx, engine.KindBinding, "get"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetParallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Get(ctx, engine.KindBinding, "get"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("GetDuringInserts", func(b *testing.B) {
		// Reads while a steady stream of writes waits for fsync: with a
		// separate reader pool they do not queue behind the writes.
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
					if err := s.Insert(ctx, benchRecord(fmt.Sprintf("background-%d", ids.Add(1)))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Get(ctx, engine.KindBinding, "get"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.StopTimer()
		close(stop)
		wg.Wait()
	})
	b.Run("UpdateParallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			r := benchRecord(fmt.Sprintf("update-%d", ids.Add(1)))
			if err := s.Insert(ctx, r); err != nil {
				b.Fatal(err)
			}
			for pb.Next() {
				if err := s.Update(ctx, r); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Get(ctx, r.Kind, r.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
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
