// Package audit compares what a storage backend holds with what the
// broker's store records, and removes what is provably a leak.
//
// # What is judged
//
// The backend side is the driver's inventory (driver.Auditable): every
// bucket and user whose name starts with the broker's name prefix and that
// carries a bucketbroker owner mark. A resource is judged only if its mark
// is one driver.OwnerMark makes, its name derives from that mark under the
// prefix (driver.MarkHash.Names), and the mark's kind is one this store
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
//   - mark-lost: the bucket or user of a ready record, or of one whose
//     deprovision or unbind failed after it was created
//     (Record.BucketCreated, UserCreated), exists without the record's
//     owner mark (none, or another owner's): someone removed or replaced
//     it, and the broker refuses to delete it (internal/ensure). Found as a
//     missing one is, and confirmed by the same second look.
//
// # Upstream records
//
// A record of an upstream broker's service (Record.Upstream set) has no
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
// DeleteAccessKey. A lost mark is reported only: whether the resource is
// the broker's is for a person to say. Missing resources are reported, never made again: an
// empty bucket would hide that the data is gone, and a new key is useless
// to an application that holds the old one. The platform must deprovision
// and provision (unbind and bind) again.
//
// # Memory
//
// The two sides are compared as they stream, in one order: the names of
// the backend's resources. The driver hands the inventory out a page at
// a time (driver.InventoryPages), each page sorted by name (S3's
// ListBuckets is; IAM's ListUsers on the embedded server is), buckets and
// users each in their own order; the store lists each kind's records by
// their resource's name, an instance's bucket, a binding's user
// (engine.ListOptions.ByName, 1,000 records a page, in byte order, as S3
// compares names). Each page of the inventory is merged with the records
// up to its names: a bucket meets the instance records of its name (names
// are unique), a record with no resource of its name in the inventory is
// judged alone, and neither is kept once judged. A record's name is set
// with its intent, derived from its id (driver.BucketName,
// driver.UserName), so no bucket or binding record waits for one; an
// upstream record has none, lists first and is judged alone. What Run
// holds is a page
// of the driver's, a page of each kind's records, and the report, plus
// what waits for the end: the candidates of missing findings (as many as
// the backend lacks) and the resources no record of their name carries
// the mark of (a record of another name may: the last pass settles them,
// see below), about as many as the leaks. Fix reads the store in pages
// too and keeps the live records of its findings' marks only.
//
// A driver whose pages come out of name order (IAM does not promise
// ListUsers' order elsewhere) is detected at the first name not after the
// one before it: that kind is then held whole, its resources kept and judged against every record of the kind in the last
// pass (the candidates of missing findings made before, against the held
// resources first), and a line is logged.
//
// # Races with a running broker
//
// The sides are read in turns, not one after the other: a page of records
// may be read before the inventory's page of their names or after it.
// Each leak and missing finding is made so that a write of a running
// broker in between cannot make it (an unknown key can be: below). The broker writes a record before it changes the
// backend (intent first), and never deletes a record (a deleted one is a
// tombstone).
//
//   - leak: a resource is a leak only on a record read after its page.
//     A tombstone of its name, which may have been read before the
//     resource's page (and been provisioned again since), is read again
//     (Get); a resource no record of its name carries the mark of waits
//     for the last pass, a listing of every record read after the whole
//     inventory, which settles it by mark as the audit always has. Either
//     way the record read comes after the resource was listed, so the
//     resource's record, written before it, is in it, unless deleted: a
//     tombstone.
//   - missing: a ready record whose resource its name's page lacks is a
//     candidate. Once the inventory is in, the driver is asked for that one
//     resource (Observe), and the record read again (Get): the finding
//     stands if the resource is still not as the record has it and the
//     record is unchanged. A provision that ended after the page was read
//     has its resource by then; a deprovision that began after the record
//     was read has changed the record before the resource (the finding is
//     then listed as not judged: audit again).
//   - unknown-key: a binding's record may be read before its user's page;
//     an unbind and a bind again of the same id in between then makes the
//     new key look unknown (the audit before had the mirror-image race).
//     Such a report is wrong, not harmful: Fix reads the store again and
//     leaves a key whose binding changed since the audit read it
//     (Record.Version).
//
// A listing in pages sees every record that existed throughout exactly
// once (engine.Store.List); records written behind its cursor are not
// seen, and need not be: their resources are either listed later (the
// last pass sees the record) or were listed before (a page read before
// the record existed, and so before its resource did).
package audit
