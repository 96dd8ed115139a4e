// Package audit compares what a storage backend holds with what the
// broker's store records, and removes what is provably a leak.
//
// # What is judged
//
// The backend side is the driver's inventory (driver.Auditable): every
// bucket and user whose name starts with the broker's name prefix and that
// carries a bucketbroker owner mark. A resource is judged only if its mark
// is one driver.OwnerMark makes, its name derives from that mark under the
// prefix (driver.NameMatchesMark), and the mark's kind is one this store
// keeps (instance for buckets, binding for users). Anything else (no mark,
// another prefix, a claim of the Kubernetes controller, whose records live
// in the cluster) is listed as not judged and never touched.
//
// The store side is every record. A record is live unless its phase is
// deleted: deprovisioned instances and unbound bindings stay as tombstones.
// A record whose operation is in progress is not judged at all, and
// neither are the resources carrying its mark: the engine is changing them.
//
// # Findings
//
//   - leak: a judged bucket or user whose mark is not the mark of a live
//     record with that name (no record, or only a tombstone).
//   - missing: a ready instance without its bucket, a ready binding
//     without its user or without the key it handed out.
//   - unknown-key: a key of a live binding's user other than the one the
//     record holds.
//
// # Upstream records
//
// A record of an upstream broker's service (Record.Upstream) has no
// bucket or user: with Options.Upstreams, each ready one whose operation
// has ended is compared with the upstream's GET (Upstream.Observe), where
// the upstream's catalog offers it (instances_retrievable,
// bindings_retrievable):
//
//   - missing: the upstream answers the GET not found.
//   - differs: the upstream has the instance under another service or plan.
//
// A record the catalog offers no GET for, one of an upstream the audit was
// not given, or one whose GET failed is listed as not judged, saying why.
// OSB offers no listing, so what an upstream holds without a record (a
// leak) cannot be found. Upstream findings are reported only: Fix never
// acts on them (a missing instance cannot be made again with its data,
// and changing what the upstream holds is the platform's call). A nil
// Driver audits the upstream records only.
//
// # Fix
//
// Fix removes leaks and unknown keys, through the driver, which checks the
// owner mark again before it deletes anything: a leaked bucket with
// DeleteBucket (only when empty, unless purge is asked for), a leaked user
// with RevokeCredential (keys, policies, then the user), an unknown key with
// DeleteAccessKey. Missing resources are reported, never made again: an
// empty bucket would hide that the data is gone, and a new key is useless
// to an application that holds the old one. The platform must deprovision
// and provision (unbind and bind) again.
//
// # Memory
//
// The inventory is taken a page at a time (driver.InventoryPages) and of
// each page only the judged resources' names, marks and keys are kept.
// The store is read a page at a time (engine.ListOptions.Limit, 1,000
// records) and each page judged as it comes: a record settles the
// verdict of the resources that carry its mark (found through an index
// of them by mark) and its own resources are looked up by name; nothing
// of the record is kept but the findings it makes. Fix reads the store in
// pages too and keeps the live records of its findings' marks only. What
// grows with the instances is the judged resources alone: names and marks
// and keys can only be compared side by side in one order, and the
// store's order (kind, id) is not the backend's (names).
//
// # Races with a running broker
//
// The inventory is read, every page of it, before the store. A record is
// written before any backend change (intent first), so every resource the
// inventory saw has its record in the store read that follows, unless the
// record was deleted in between. The pages are read one after the other,
// not in one snapshot, but every page is read after the inventory, and a
// listing in pages sees every record that existed throughout exactly once
// (records are never removed: a deleted one is a tombstone), so the
// argument holds page by page. Fix reads the store again right before it acts and leaves
// any finding whose record has since changed.
package audit
