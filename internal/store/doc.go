// Package store holds what every engine.Store implementation shares: the
// one JSON form a record is kept in, and the times a store stamps.
//
// The stores (store/sqlite, store/postgres) keep each record as this JSON
// beside a few indexed columns (kind, id, instance, resource name, phase,
// operation state, version). Writing the same bytes on both lets the shared conformance suite
// (store/storetest) hold them to the same round trip, byte for byte. For
// the same reason both stamp a record through ForInsert and ForUpdate, and
// both run their schema migrations through Migrate: only the SQL differs.
//
// Encode refuses a record Decode could not read back, or that is beyond
// what the engine ever writes (MaxRecordDepth, MaxRecordBytes), so a store
// never writes one. A record that cannot be decoded anyway (an older
// version's) must not stop anything: the stores' List skips it and notes
// it in their Unreadables, and FindUnreadable and Repair, on a RawStore,
// are what `bucketbroker admin records` lists and repairs them with.
//
// Both stores create a schema only in a database that nothing says held
// records before (CheckNew, through Migrate: the SQLite store's marker, the
// caller's OpenOptions.Earlier), else Open fails with ErrLost; both open
// read-only (OpenOptions.ReadOnly, for the admin listings beside a running
// broker): they create and migrate nothing, their connections refuse
// writes, and they refuse a schema at another version than theirs
// (CheckSchema); and both mark a write that found no room with Full (engine.ErrFull) and remember
// it in Writes, which their Writable reports to readiness until a write,
// theirs or a probe's, succeeds.
package store
