// Package broker assembles a running bucketbroker from its parts: the state
// store, the storage side (package backend: the driver and, by default, the
// embedded S3 + IAM server it talks to over loopback), the engine and the
// OSB HTTP door.
//
// It owns start-up order and shutdown order. Start-up checks each part
// before the broker takes requests (the store opens and migrates, the
// backend answers and accepts the root credentials), so that a wrong
// endpoint or key is one clear line at start, not an error on the first
// user request. Shutdown stops taking requests, lets the engine's workers
// stop (unfinished operations stay recorded and resume on the next start),
// then stops the embedded server and closes the store. The store opens
// first, before anything is written into the data dir: what an earlier
// start wrote there (the encryption key, the replica id, the embedded
// server's data) tells OpenStore that an empty store was lost, not new.
// Readiness reads the store and asks whether its writes fail for want of
// space (Store.Writable).
//
// Secrets the caller does not give are generated once and kept in the data
// dir (0600): the OSB API password (broker-password) and, through package
// backend, the embedded server's root keys (s3-root-credentials.json).
// Start reads them back on every later start, so that a platform
// registered with the password, and the users made under the root keys,
// keep working across restarts.
// Generated says which ones were generated and where they are, so that the
// caller can point the operator at the file instead of printing a secret.
package broker
