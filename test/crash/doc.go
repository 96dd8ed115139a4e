// Package crash is the exactly-once proof: it runs the real bucketbroker
// binary and checks that no crash, duplicate storm or backend outage ends in
// a second bucket, a leaked or lost credential, or an operation stuck in
// progress.
//
// TestCrashPoints kills the broker (embedded S3 server, SQLite) at every
// named crash point of internal/crashpoint, for every operation that passes
// the point, synchronous and asynchronous; starts it again on the same data
// dir; replays what a platform would (re-send the PUT or DELETE, poll
// last_operation, fetch the binding); and checks the backend by listing it.
// It prints a table, crash point x operation -> converged, leaked, lost or
// stuck, and fails on any cell that did not converge.
//
// TestClaimCrashPoints does the same for the ObjectBucketClaim controller:
// it runs `bucketbroker controller` (embedded S3 + IAM server) against a
// kube-apiserver and etcd of its own (envtest, as a user holding only the
// ClusterRole of config/rbac), kills it at every claim crash point while a
// claim is provisioned or deleted, starts it again on the same data dir,
// and checks the cluster and the backend: one bucket, one ObjectBucket with
// the claim's UID, one live key (the Secret's, working in its bucket and
// nowhere else), and after the deletion nothing left and no finalizer
// stuck. TestClaimVerdictsCatchFaults shows that its checks catch each fault.
//
// TestLeaderElection runs two replicas of `bucketbroker controller` with
// leader election against one API server and one versitygw pair (the s3iam
// driver: replicas cannot share the embedded server): one holds the Lease
// and binds claims while the other reconciles nothing; stopped with
// SIGTERM, the leader releases the Lease and the other takes over at its
// next retry; killed with SIGKILL while claims are provisioned, it is
// replaced once the Lease runs out, and every claim converges to one
// bucket, one ObjectBucket and one key, and to nothing once deleted.
//
// TestKillUnderMixedLoad kills the broker with SIGKILL at random moments,
// every other time while a purge is underway, under a mixed load of 100
// instances and 300 bindings, sync and async: buckets kept with the
// application's objects, unbinds, deprovisions with purge_on_delete of
// buckets holding objects, empty deprovisions. Then it replays every
// request as a platform does and audits the backend: one bucket per live
// instance (with its objects), one user per live binding holding exactly
// the answered key, which works in its bucket only, nothing else, no
// operation in progress, a clean `admin audit`. TestMixedVerdictsCatchFaults
// shows that its new checks catch their faults.
//
// TestClaimsUnderKill kills one `bucketbroker controller` with SIGKILL at
// random moments while several users create, delete and drift-test 40
// claims at once, and checks every claim and the backend afterwards; it
// found the Secret repair's lost keys and the claims gone without their
// deletion (docs/guarantees.md).
//
// TestStorm sends 500 identical provisions and binds at once (64 in flight),
// with and without one conflicting request among them, and checks every
// status code against the answer table of docs/architecture.md.
//
// TestBackendOutage stops an external versitygw (processes of its own,
// started with hack/versitygw.sh) under asynchronous operations, checks that
// they wait in progress with a description while the broker keeps
// answering, finish once it is back, and fail at --async-timeout if it stays
// down, after which the platform's retry succeeds.
//
// TestBackendFaults puts HTTP fault proxies between the broker and its own
// versitygw pair: with the first requests of every backend call answered
// 503 SlowDown or 500 InternalError, provisions and binds (sync and async)
// still succeed once each, after retries the proxies count; with every
// backend request slowed down, the catalog, last_operation and an async
// provision's 202 answer as fast as on a clean backend.
//
// TestReplicasStalledBackend runs three broker replicas on one PostgreSQL
// database against a versitygw pair of its own, stops that pair with
// SIGSTOP for three lease TTLs, twice, under a storm of duplicate binds,
// and has one replica die at bind/key-created: every bind gets its final
// answer, every binding one user with exactly the answered, working key,
// and the leak audit is clean.
//
// docs/guarantees.md states the guarantees and holds the last table;
// `make test-crash` runs the whole proof.
package crash
