package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Fix removes the leaks and unknown keys of rep through the driver, and
// records on each finding what it did. It reads the store again first and
// leaves every finding that a record has claimed since Run (a new
// provision or bind under the same mark, a binding that changed). A
// failure to remove one resource is noted on its finding and does not stop
// the others; the error returned is only for a store that cannot be read.
func Fix(ctx context.Context, opts Options, rep *Report) error {
	// The live records of the findings' marks only, read a page at a
	// time as Run reads them.
	live := map[string]*engine.Record{}
	for _, f := range rep.Findings {
		if f.Fixable() && !f.Fixed {
			live[f.Owner] = nil
		}
	}
	err := eachPage(ctx, opts.Store, func(page []*engine.Record) error {
		for _, r := range page {
			if _, ok := live[state(r).Owner]; ok && state(r).Owner != "" && r.Phase != engine.PhaseDeleted {
				live[state(r).Owner] = r
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the store again before fixing: %w", err)
	}
	rep.Fixed = true
	// Users before buckets: a leaked credential is the more dangerous leak.
	order := map[string]int{ResourceKey: 0, ResourceUser: 1, ResourceBucket: 2}
	idx := make([]int, 0, len(rep.Findings))
	for i := range rep.Findings {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return order[rep.Findings[a].Resource] - order[rep.Findings[b].Resource] })
	for _, i := range idx {
		f := &rep.Findings[i]
		if !f.Fixable() || f.Fixed {
			continue
		}
		if why := changedSince(f, live); why != "" {
			f.Action = "left: " + why
			continue
		}
		f.Action, f.Fixed = fixOne(ctx, opts, f)
	}
	return nil
}

// changedSince says why a finding no longer holds in the store as it is
// now, or "".
func changedSince(f *Finding, live map[string]*engine.Record) string {
	r := live[f.Owner]
	switch f.Kind {
	case KindLeak:
		if r != nil {
			return fmt.Sprintf("%s now carries its mark (%s, %s)", recordName(r), r.Phase, r.Op.Type)
		}
	case KindUnknownKey:
		switch {
		case r == nil:
			return "its binding is no longer live"
		case r.Version != f.version || !r.Op.Finished():
			return fmt.Sprintf("%s changed since the audit read it", recordName(r))
		case state(r).AccessKeyID == f.Name:
			return fmt.Sprintf("%s now holds this key", recordName(r))
		}
	}
	return ""
}

func fixOne(ctx context.Context, opts Options, f *Finding) (string, bool) {
	var err error
	switch f.Resource {
	case ResourceBucket:
		err = opts.Driver.DeleteBucket(ctx, f.Name, f.Owner, opts.Purge)
		if errors.Is(err, driver.ErrBucketNotEmpty) {
			return "left: the bucket holds objects; audit again with --purge to delete them with it", false
		}
	case ResourceUser:
		err = opts.Driver.RevokeCredential(ctx, f.Name, f.Owner)
	case ResourceKey:
		err = opts.Driver.DeleteAccessKey(ctx, f.User, f.Owner, f.Name)
	}
	switch {
	case errors.Is(err, driver.ErrOwnedByOther):
		return "left: its owner mark changed since the audit: " + err.Error(), false
	case err != nil:
		return "failed: " + err.Error(), false
	}
	return "deleted", true
}
