// Command bucketbroker hands out object-storage buckets and bucket-scoped
// credentials through the Open Service Broker API.
//
//	bucketbroker serve                   run the OSB broker (embedded S3 server and SQLite by default)
//	bucketbroker controller              run the Kubernetes ObjectBucketClaim controller
//	bucketbroker admin migrate           create or upgrade the store's schema, then exit
//	                                     (--new-store: start over on an empty store on purpose)
//	bucketbroker admin audit [--fix]     compare the backend with the store: leaks, missing
//	                                     resources, unknown keys, lost owner marks
//	bucketbroker admin records           list the records the store cannot read
//	bucketbroker admin records repair    make them readable again
//	bucketbroker admin instances         list the instances (bindings, operations: likewise),
//	                                     read-only beside a running serve; --stuck, -o wide|json
//	bucketbroker admin show ID           one record: operations, backend names, owner marks
//	bucketbroker version                 print the version, commit and Go version
//
// The storage flags (flags.go) are declared once for every command that
// builds a backend (serve, controller, admin audit, admin show
// --check-marks), and storage.Start
// (internal/storage) builds it from them. --pprof-listen (serve,
// controller, admin audit) serves net/http/pprof on a server of its own,
// off by default.
//
// Secrets are read from the environment, never from flags (flags show in
// process listings): BUCKETBROKER_USERNAME, BUCKETBROKER_PASSWORD,
// BUCKETBROKER_S3_ROOT_ACCESS_KEY, BUCKETBROKER_S3_ROOT_SECRET_KEY.
package main
