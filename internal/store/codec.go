package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/jsonnest"
)

// Now is the time a store stamps on records: UTC, whole microseconds
// (PostgreSQL's precision), so that the caller's copy equals what a later
// Get returns.
func Now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// CheckKey rejects an empty kind or id.
func CheckKey(kind engine.Kind, id string) error {
	if kind == "" || id == "" {
		return errors.New("record kind and id must not be empty")
	}
	return nil
}

// Encode returns the JSON a store keeps for r, with every time in UTC. It
// changes r's times to UTC too. HTML escaping is off: encoding/json would
// otherwise rewrite '<', '>' and '&' inside the json.RawMessage fields (the
// canonical parameters), and a record must come back byte for byte.
func Encode(r *engine.Record) ([]byte, error) {
	r.CreatedAt, r.UpdatedAt, r.LeaseUntil = r.CreatedAt.UTC(), r.UpdatedAt.UTC(), r.LeaseUntil.UTC()
	utcOp(&r.Op)
	for i := range r.History {
		utcOp(&r.History[i])
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	data := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if err := checkReadable(data); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	return data, nil
}

// Limits of the JSON a store writes. A record's own structure nests 4
// levels (record, operation, target, parameters) above the free-form values
// it carries, which the engine bounds (engine.MaxFreeFormDepth and
// MaxFreeFormBytes, several of them a record); these bounds leave room for
// that and stay far below what Decode can read (encoding/json stops at
// 10000 levels).
//
// Decode applies the same bounds, so that a stored record beyond them
// (written outside bucketbroker) is unreadable, reported and repaired
// (Repair prunes it to MaxRecordDepth), rather than readable but refused
// by every write. MaxRecordBytes is far above anything the engine writes
// (each of a record's free-form values is MaxFreeFormBytes at most).
const (
	MaxRecordDepth = 64
	MaxRecordBytes = 16 << 20
)

// checkReadable refuses a record Decode could not read back, or that is
// beyond what the engine ever writes: a store never writes such a record,
// because one unreadable record would answer 503 for its id forever.
func checkReadable(data []byte) error {
	if len(data) > MaxRecordBytes {
		return fmt.Errorf("%d bytes, more than the %d a record may have", len(data), MaxRecordBytes)
	}
	if d, over := jsonnest.Exceeds(data, MaxRecordDepth); over {
		return fmt.Errorf("nests %d levels deep, more than the %d a record may", d, MaxRecordDepth)
	}
	return nil
}

func utcOp(o *engine.Operation) {
	o.StartedAt, o.Deadline, o.EndedAt = o.StartedAt.UTC(), o.Deadline.UTC(), o.EndedAt.UTC()
}

// Decode parses what Encode wrote. version is the store's version column:
// it, not the JSON, is what compare-and-swap checks, so it wins.
func Decode(version int64, data []byte) (*engine.Record, error) {
	if err := checkReadable(data); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	r := new(engine.Record)
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	r.Version = version
	return r, nil
}
