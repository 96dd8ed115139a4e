// Package buildinfo says which build of bucketbroker is running: its
// version, the commit it was built from and the Go toolchain that built it.
//
// The Go linker stamps a binary with its module version and, when it is
// built inside a git checkout with VCS stamping on, the commit
// (runtime/debug build info). A release build that has neither (a build in
// a container without .git, or with -buildvcs=false) sets them with
// -ldflags "-X github.com/bucketbroker/bucketbroker/internal/buildinfo.version=v1.2.3
// -X github.com/bucketbroker/bucketbroker/internal/buildinfo.commit=<sha>";
// a value set that way wins over the stamped one. What is known neither way
// reads "unknown", never an empty string, so that `bucketbroker version` and
// the bucketbroker_build_info metric always have a value to show.
package buildinfo
