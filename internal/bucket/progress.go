package bucket

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// How often a purge's progress is saved into the operation's description
// (a store write each time; what a platform polling last_operation reads)
// and logged. The first report of a purge is saved and logged at once.
const (
	progressSaveEvery = 2 * time.Second
	progressLogEvery  = 10 * time.Second
)

// purgeProgress returns ctx with a driver.PurgeProgress that shows how many
// objects a purge of bucket deleted so far, and a function that reports
// why the purge must stop: a save of the description was refused (another
// replica holds the operation now, or the store cannot write), and ctx was
// canceled for it.
func purgeProgress(ctx context.Context, w *engine.Work, bucket string) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var (
		mu            sync.Mutex
		saved, logged time.Time
		stopped       error
		start         = time.Now()
	)
	report := func(deleted int64) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if stopped == nil && now.Sub(saved) >= progressSaveEvery {
			saved = now
			desc := fmt.Sprintf("%s in progress: deleting the objects of bucket %s, %d deleted so far", w.Rec.Op.Type, bucket, deleted)
			if err := w.Progress(ctx, desc); err != nil {
				stopped = err
				cancel(err)
			}
		}
		if now.Sub(logged) >= progressLogEvery {
			logged = now
			w.Logger().Info("Purging bucket", "kind", w.Rec.Kind, "id", w.Rec.ID, "bucket", bucket,
				"deleted", deleted, "elapsed", now.Sub(start).Round(time.Second))
		}
	}
	return driver.WithPurgeProgress(ctx, report), func() error {
		mu.Lock()
		defer mu.Unlock()
		return stopped
	}
}
