// Package illbroker is a deliberately ill-behaved OSB broker, for testing
// upstream mode (docs/upstream.md) against the kind of broker that started
// the project: one fronting a Cloud Foundry marketplace, not
// duplicate-safe.
//
// It answers a create of an instance id that exists with 409 or 500 "name
// taken" (even an identical one), a bind of a binding id that exists with
// 500, refuses to deprovision an instance with bindings, keeps asynchronous
// operations in progress for Config.AsyncDelay, fails a configurable
// fraction of requests transiently (503 before doing anything, 500 or a
// dropped connection after doing the work) and can end an asynchronous
// provision "failed" after creating the instance. It can answer every
// last_operation without an operation "failed", "The operation could not
// be found." (as a third-party broker did for a live instance), and lose
// the answer to the first create of each id. Every random choice comes
// from Config.Seed, and requests are served one at a time, so a run is
// reproducible for a given order of requests.
//
// GET /illbroker/state (StatePath) reports, per instance and binding id,
// how many times it was created and deleted and how many credentials were
// handed out: the count the exactly-once tests check. cmd/illbroker runs
// it as its own process; test/harness starts that (StartIllBroker).
//
// Test support only: nothing that ships imports it.
package illbroker
