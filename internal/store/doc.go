// Package store holds what every engine.Store implementation shares: the
// one JSON form a record is kept in, and the times a store stamps.
//
// The stores (store/sqlite, store/postgres) keep each record as this JSON
// beside a few indexed columns (kind, id, instance, phase, operation state,
// version). Writing the same bytes on both lets the shared conformance suite
// (store/storetest) hold them to the same round trip, byte for byte.
package store
