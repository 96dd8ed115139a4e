// Command bucketbroker hands out object-storage buckets and bucket-scoped
// credentials through the Open Service Broker API.
//
//	bucketbroker serve    run the broker (embedded S3 server and SQLite by default)
//
// The storage flags (flags.go) are declared once for every command that
// builds a backend (serve, controller, admin audit), and backend.Start
// (internal/backend) builds it from them. --pprof-listen (serve,
// controller, admin audit) serves net/http/pprof on a server of its own,
// off by default.
//
// Secrets are read from the environment, never from flags (flags show in
// process listings): BUCKETBROKER_USERNAME, BUCKETBROKER_PASSWORD,
// BUCKETBROKER_S3_ROOT_ACCESS_KEY, BUCKETBROKER_S3_ROOT_SECRET_KEY.
package main
