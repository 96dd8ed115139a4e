// Package tlsreload serves a TLS certificate from a pair of PEM files and
// picks up new files without a restart, as cert-manager (or any rotation
// job) replaces them before the old certificate expires.
//
// The files are checked at each TLS handshake, not by a watcher: a stat of
// both files tells whether either changed since it was loaded (another
// inode, size or modification time; a Kubernetes Secret volume swaps a
// symlink, which the stat follows). So the first connection after a
// rotation gets the new certificate, with no background goroutine and no
// delay to wait out. Connections already open keep the certificate they
// were made with.
//
// A rotation writes two files, and a handshake may come between the two
// writes. A pair that does not load (a key that does not match its
// certificate, a half-written file) is not served: the certificate loaded
// before stays in use, the failure is logged once, and the files are tried
// again when they change once more. Only the first load, at start, fails
// hard, so that a wrong path is one clear error before the server listens.
//
// Config serves TLS 1.2 and newer only.
package tlsreload
