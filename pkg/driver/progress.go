package driver

import (
	"context"
	"sync/atomic"
)

// A purge of a bucket with many objects takes minutes. A driver says how
// far it got by calling Purged after each batch of objects (or object
// versions) it deleted in DeleteBucket with purge; the caller, which put a
// PurgeProgress in the context, shows the total to the platform polling
// the operation and in its log. A driver that never calls Purged is
// correct, only silent; Purged without a PurgeProgress in ctx does
// nothing.

type purgeKey struct{}

// PurgeProgress receives the number of objects a purge deleted so far. It
// may be called from several goroutines of one purge at once.
type PurgeProgress func(deleted int64)

type purgeCounter struct {
	total  atomic.Int64
	report PurgeProgress
}

// WithPurgeProgress returns a context whose purges report to p.
func WithPurgeProgress(ctx context.Context, p PurgeProgress) context.Context {
	return context.WithValue(ctx, purgeKey{}, &purgeCounter{report: p})
}

// Purged records that n more objects of the bucket being purged are gone.
func Purged(ctx context.Context, n int) {
	c, ok := ctx.Value(purgeKey{}).(*purgeCounter)
	if !ok || n <= 0 {
		return
	}
	c.report(c.total.Add(int64(n)))
}
