package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/jsonnest"
)

// Unreadables is the set of records a store's reads found unreadable and
// have not found readable since. A store's List skips such a record and
// notes it here; its Get notes it too and returns the error. The zero value
// is empty and ready.
type Unreadables struct {
	mu sync.Mutex
	m  map[unreadableKey]engine.UnreadableRecord
}

type unreadableKey struct {
	kind engine.Kind
	id   string
}

// Note records that the record could not be decoded.
func (u *Unreadables) Note(r engine.UnreadableRecord) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[unreadableKey]engine.UnreadableRecord)
	}
	k := unreadableKey{r.Kind, r.ID}
	if old, ok := u.m[k]; ok && r.InstanceID == "" {
		r.InstanceID = old.InstanceID // Get does not read the column
	}
	u.m[k] = r
}

// Readable records that the record decoded: it was repaired.
func (u *Unreadables) Readable(kind engine.Kind, id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) > 0 {
		delete(u.m, unreadableKey{kind, id})
	}
}

// List returns the records noted, ordered by kind and id.
func (u *Unreadables) List() []engine.UnreadableRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]engine.UnreadableRecord, 0, len(u.m))
	for _, r := range u.m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b engine.UnreadableRecord) int {
		if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Raw is a record as a store keeps it: its key columns and its JSON.
type Raw struct {
	Kind       engine.Kind
	ID         string
	InstanceID string
	Version    int64
	Data       []byte
}

// RawStore is a Store that also hands out records undecoded, for the
// operator's repair of records that cannot be decoded.
type RawStore interface {
	engine.Store
	// GetRaw returns the stored record of that kind and id, or an error
	// wrapping engine.ErrNotFound.
	GetRaw(ctx context.Context, kind engine.Kind, id string) (Raw, error)
	// ScanRaw calls fn with every stored record, ordered by kind and id,
	// and stops at the first error fn returns.
	ScanRaw(ctx context.Context, fn func(Raw) error) error
}

// FindUnreadable reads every record of s and returns those that cannot be
// decoded.
func FindUnreadable(ctx context.Context, s RawStore) ([]engine.UnreadableRecord, error) {
	var out []engine.UnreadableRecord
	err := s.ScanRaw(ctx, func(r Raw) error {
		if _, err := Decode(r.Version, r.Data); err != nil {
			out = append(out, unreadable(r, err))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find unreadable records: %w", err)
	}
	return out, nil
}

func unreadable(r Raw, err error) engine.UnreadableRecord {
	return engine.UnreadableRecord{Kind: r.Kind, ID: r.ID, InstanceID: r.InstanceID, Version: r.Version, Error: err.Error()}
}

// ErrReadable is returned by Repair for a record that decodes as it is.
var ErrReadable = errors.New("record is readable: nothing to repair")

// Repaired says what Repair changed.
type Repaired struct {
	// Pruned is how many objects and arrays nested deeper than
	// MaxRecordDepth were replaced by null.
	Pruned int
	// Version is the record's version after the repair.
	Version int64
}

// Repair makes an unreadable record readable again: every object or array
// that starts deeper than MaxRecordDepth levels (only the free-form values
// a record carries can nest that deep) is replaced by null, and the result
// is written with a compare-and-swap on the version it was read at, through
// the store's own Update, which checks it reads back. Everything else of the
// record is kept, so that the platform can deprovision or unbind it as
// usual. A record that decodes already is left alone (ErrReadable).
func Repair(ctx context.Context, s RawStore, kind engine.Kind, id string) (Repaired, error) {
	raw, err := s.GetRaw(ctx, kind, id)
	if err != nil {
		return Repaired{}, fmt.Errorf("repair record %s/%s: %w", kind, id, err)
	}
	if _, err := Decode(raw.Version, raw.Data); err == nil {
		return Repaired{}, fmt.Errorf("repair record %s/%s: %w", kind, id, ErrReadable)
	}
	pruned, n := jsonnest.Prune(raw.Data, MaxRecordDepth)
	r, err := Decode(raw.Version, pruned)
	if err != nil {
		return Repaired{}, fmt.Errorf("repair record %s/%s: still unreadable after pruning %d values: %w", kind, id, n, err)
	}
	if err := s.Update(ctx, r); err != nil {
		return Repaired{}, fmt.Errorf("repair record %s/%s: %w", kind, id, err)
	}
	return Repaired{Pruned: n, Version: r.Version}, nil
}

// DecodeListed decodes a record a store's List read. One that cannot be
// decoded is noted in u and skipped (ok false), so that it never stops the
// listing of the others (start-up, the sweep, an instance's bindings); one
// that decodes is taken off u, where a repair has left it.
func DecodeListed(u *Unreadables, raw Raw) (r *engine.Record, ok bool) {
	r, err := Decode(raw.Version, raw.Data)
	if err != nil {
		u.Note(unreadable(raw, err))
		return nil, false
	}
	u.Readable(raw.Kind, raw.ID)
	return r, true
}
