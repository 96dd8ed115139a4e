// Package storetest is the conformance suite for engine.Store. Every store
// (internal/store/sqlite and internal/store/postgres) runs the same tests
// with Run, from its own test file, against a real database:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) engine.Store { return openEmpty(t) })
//	}
//
// The suite pins down what the engine relies on and the interface comments
// leave implicit. A record comes back exactly as written: every field, the
// json.RawMessage bytes unchanged (fingerprints are computed over them),
// times to the microsecond and in UTC. Insert is create-if-absent: of 200
// concurrent Inserts of one id exactly one succeeds and the others get
// ErrExists, never another error such as a lock timeout. Update is a
// compare-and-swap on Version: of 100 concurrent Updates made from the same
// read exactly one succeeds and the others get ErrStale. A failed call
// changes neither the stored record nor the caller's copy. List orders by
// kind, then id, in byte order, and selects on the state the latest write
// left; paged (ListOptions.After and Limit), it lists every record that
// existed throughout exactly once and in order, whatever is inserted or
// updated between pages, and a page shorter than its Limit ends the
// listing (an unreadable record does not count against it). ListByName:
// one kind listed by its resources' names (Record.ResourceName), then id,
// in byte order, as Insert and Update wrote them, paged after a (name,
// id) cursor. Every call
// honors its context. A record that could not be read
// back (nested past encoding/json's limit, or too large) is never written;
// one planted in the database behind the store (RunUnreadable) is skipped
// by List and reported, fails Get for its id alone, and is made readable by
// store.Repair.
//
// For the PostgreSQL store this means, among other things: a "C" collation
// (or COLLATE "C" in ORDER BY) for byte order, the record kept as json or
// text rather than jsonb (jsonb rewrites the raw parameter bytes), and
// times of at most microsecond precision set by the store itself.
package storetest
