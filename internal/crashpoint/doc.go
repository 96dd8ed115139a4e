// Package crashpoint lets tests kill the process at named points between a
// durable write and a side effect, as kill -9 would, to prove that every
// such point converges after a restart.
//
// It is inert unless the environment variable BUCKETBROKER_CRASH_AT names
// points when the process starts (comma-separated, e.g.
// "provision/bucket-created,bind/key-created"). A point's name is
// "<operation>/<what has just happened>". When the process reaches a named
// point it writes one line to stderr and exits with status 137 at once:
// no deferred functions, no flushing, no graceful shutdown.
package crashpoint
