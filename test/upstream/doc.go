// Package upstream tests upstream mode with real processes: a bucketbroker
// binary in front of the ill-behaved broker (test/illbroker) and in front of
// another bucketbroker process, driven over HTTP as a platform drives it,
// counting what reached the upstream (the ill broker's /illbroker/state).
package upstream
