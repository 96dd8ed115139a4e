package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Store is the part of engine.Store the audit reads: listings in pages,
// by resource name (engine.ListOptions.ByName) and by key, and Get to
// read a record again before a finding is reported.
type Store interface {
	List(ctx context.Context, opts engine.ListOptions) ([]*engine.Record, error)
	Get(ctx context.Context, kind engine.Kind, id string) (*engine.Record, error)
}

// Driver is what the audit needs of a driver: the inventory, a look at
// one resource (to confirm a missing one), and the calls that remove a
// leak, each of which checks the owner mark itself.
type Driver interface {
	driver.Auditable
	Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error)
	DeleteBucket(ctx context.Context, name, owner string, purge bool) error
	RevokeCredential(ctx context.Context, userName, owner string) error
}

// Options configure an audit.
type Options struct {
	Store Store
	// Driver is the storage backend's; nil audits the upstreams' records
	// only (a broker started with --bucket-service=false).
	Driver Driver
	// Upstreams are compared with the records of their services.
	Upstreams []Upstream
	// Prefix is the broker's name prefix (serve --name-prefix): only
	// resources named under it are judged.
	Prefix string
	// Purge lets Fix delete a leaked bucket that still holds objects.
	Purge bool
	// Logger receives the audit's notes (a listing out of name order);
	// nil discards them.
	Logger *slog.Logger
}

// Kind is the kind of a finding.
type Kind string

// Kinds of findings.
const (
	KindLeak       Kind = "leak"
	KindMissing    Kind = "missing"
	KindUnknownKey Kind = "unknown-key"
	KindMarkLost   Kind = "mark-lost"
)

// Resource types.
const (
	ResourceBucket = "bucket"
	ResourceUser   = "user"
	ResourceKey    = "key"
)

// Finding is one difference between the backend and the store.
type Finding struct {
	Kind Kind `json:"kind"`
	// Resource is bucket, user or key.
	Resource string `json:"resource"`
	// Name is the bucket or user name, or the access key id.
	Name string `json:"name"`
	// User is the user a key belongs to.
	User string `json:"user,omitempty"`
	// Owner is the owner mark the resource carries (leaks, keys) or should
	// carry (missing).
	Owner string `json:"owner,omitempty"`
	// Record is the record concerned, "instance/ID" or "binding/ID".
	Record string `json:"record,omitempty"`
	// Detail says why this is a finding.
	Detail string `json:"detail"`
	// Action says what Fix did, or why nothing is done.
	Action string `json:"action,omitempty"`
	// Fixed is set when Fix removed the resource.
	Fixed bool `json:"fixed"`

	version int64 // of the record, for Fix's re-check of unknown keys
}

// Fixable reports whether Fix may act on the finding.
func (f Finding) Fixable() bool { return f.Kind == KindLeak || f.Kind == KindUnknownKey }

// Skipped is a record or resource the audit did not judge.
type Skipped struct {
	// Record is "instance/ID" or "binding/ID"; Resource and Name name a
	// backend resource instead.
	Record   string `json:"record,omitempty"`
	Resource string `json:"resource,omitempty"`
	Name     string `json:"name,omitempty"`
	Reason   string `json:"reason"`
}

// Report is the outcome of Run, updated by Fix.
type Report struct {
	Prefix string `json:"prefix"`
	// Buckets and Users count the marked resources the backend listed;
	// Records the store's records, tombstones included.
	Buckets  int       `json:"buckets"`
	Users    int       `json:"users"`
	Records  int       `json:"records"`
	Findings []Finding `json:"findings"`
	Skipped  []Skipped `json:"skipped"`
	// Fixed is set once Fix has run.
	Fixed bool `json:"fixRan"`
}

// Drift reports whether a finding remains: any when Fix has not run, the
// ones it did not remove otherwise.
func (r *Report) Drift() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return !f.Fixed })
}

// pageSize is how many records the audit reads from the store at once.
var pageSize = 1000

// Run compares the backend with the store and reports the differences. It
// changes nothing.
//
// The driver's inventory comes a page at a time (driver.InventoryPages),
// each page sorted by name, and is merged with the store's records of
// the same kind listed by name (engine.ListOptions.ByName) a page at a
// time: a bucket meets the instance records of its name, a user the
// binding records of its name, and neither is kept once judged. What the
// audit holds is a page of the driver's, a page of each kind's records,
// the report, and the resources whose verdict waits for the last pass
// (see the package documentation).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Store == nil || (opts.Driver == nil && len(opts.Upstreams) == 0) {
		return nil, errors.New("audit: a store and a driver or an upstream are required")
	}
	if err := driver.ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	rep := &Report{Prefix: opts.Prefix, Findings: []Finding{}, Skipped: []Skipped{}} // [] in JSON, not null
	j := &judge{prefix: opts.Prefix, rep: rep, store: opts.Store, drv: opts.Driver, noDriver: opts.Driver == nil,
		ups: map[string]Upstream{}, log: opts.Logger,
		buckets: &stream{kind: engine.KindInstance, resource: ResourceBucket},
		users:   &stream{kind: engine.KindBinding, resource: ResourceUser}}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	for _, u := range opts.Upstreams {
		j.ups[u.Name()] = u
	}
	if opts.Driver != nil {
		var failed error // the merge's own, not the driver's
		err := driver.InventoryPages(ctx, opts.Driver, opts.Prefix+"-", func(inv driver.Inventory) error {
			failed = j.inventory(ctx, inv)
			return failed
		})
		switch {
		case failed != nil:
			return nil, failed
		case err != nil:
			return nil, fmt.Errorf("list the backend: %w", err)
		}
	}
	for _, s := range j.streams() {
		if err := j.drain(ctx, s); err != nil {
			return nil, err
		}
	}
	if err := j.settle(ctx); err != nil {
		return nil, err
	}
	if err := j.confirmPending(ctx); err != nil {
		return nil, err
	}
	slices.SortStableFunc(j.skipResource, func(a, b Skipped) int {
		return cmp.Or(cmp.Compare(resourceOrder[a.Resource], resourceOrder[b.Resource]), cmp.Compare(a.Name, b.Name))
	})
	// Records in the order of their keys, as the report has always listed
	// them (the merge reads them by name).
	for _, list := range [][]Skipped{rep.Skipped, j.skipMissing, j.skipUpstream} {
		slices.SortStableFunc(list, func(a, b Skipped) int { return strings.Compare(a.Record, b.Record) })
	}
	rep.Skipped = slices.Concat(rep.Skipped, j.skipResource, j.skipMissing, j.skipUpstream)
	slices.SortFunc(rep.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.User, b.User), cmp.Compare(a.Name, b.Name))
	})
	return rep, nil
}

// resourceOrder is the order of the resources not judged in the report:
// buckets, then users, each by name.
var resourceOrder = map[string]int{ResourceBucket: 0, ResourceUser: 1}

// eachPage calls fn with every record of the store, pageSize at a time,
// in (kind, id) order.
func eachPage(ctx context.Context, s Store, fn func([]*engine.Record) error) error {
	opts := engine.ListOptions{Limit: pageSize}
	for {
		page, err := s.List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list the store: %w", err)
		}
		if err := fn(page); err != nil {
			return err
		}
		if len(page) < opts.Limit {
			return nil
		}
		opts.After = engine.KeyOf(page[len(page)-1])
	}
}

func refuseUnreadable(s Store) error {
	u, ok := s.(engine.UnreadableReporter)
	if !ok {
		return nil
	}
	if bad := u.Unreadable(); len(bad) > 0 {
		return fmt.Errorf("the store holds %d records it cannot read (the first: %s %s): without them their buckets and users would look leaked; "+
			"repair them with `bucketbroker admin records repair --all`, then audit again", len(bad), bad[0].Kind, bad[0].ID)
	}
	return nil
}

// judge merges the inventory with the records, one stream per kind, and
// holds what the report needs of them.
type judge struct {
	prefix   string
	rep      *Report
	store    Store
	drv      Driver
	log      *slog.Logger
	ups      map[string]Upstream
	buckets  *stream // the buckets and the instance records
	users    *stream // the users and the binding records
	noDriver bool    // no storage backend to compare bucket records with
	// Skipped in the order the report has always listed them: records in
	// progress (in rep.Skipped), resources not judged, records not
	// compared with the backend, then with their upstream.
	skipResource, skipMissing, skipUpstream []Skipped
}

func (j *judge) streams() []*stream { return []*stream{j.buckets, j.users} }

// resource is what the audit keeps of a judged bucket or user while it
// is judged: its name, mark and keys as the inventory listed them, and
// the verdict of the records read so far. The mark is kept as its hash:
// its kind is the resource's (instance for a bucket, binding for a user,
// as judged requires); the keys as one string.
type resource struct {
	name string
	mark driver.MarkHash
	keys string // a user's access key ids, sorted, keySep between them
	// seen is the record that carries the mark, if one has come: a
	// tombstone (gone, at goneVersion), or a live one (which a tombstone
	// does not overrule); owned when a live record owns it.
	seen        seen
	owned       bool
	gone        string // the tombstone's id
	goneVersion int64
	// why it is a leak, when the record that carries its mark says so.
	why string
}

// keySep separates a user's access key ids in resource.keys.
const keySep = "\x00"

type seen uint8

const (
	seenNone seen = iota
	seenGone
	seenLive
)

// inventory merges one page of the driver's inventory with the records
// of its names: the resources to judge are judged, the others noted as
// not judged.
func (j *judge) inventory(ctx context.Context, inv driver.Inventory) error {
	j.rep.Buckets += len(inv.Buckets)
	j.rep.Users += len(inv.Users)
	var names []string
	var rs []resource
	for _, b := range inv.Buckets {
		names = append(names, b.Name)
		if h, ok := j.judged(ResourceBucket, b.Name, b.Owner, engine.KindInstance); ok {
			rs = append(rs, resource{name: b.Name, mark: h})
		}
	}
	if err := j.merge(ctx, j.buckets, names, rs); err != nil {
		return err
	}
	names, rs = names[:0], nil
	for _, u := range inv.Users {
		names = append(names, u.Name)
		if h, ok := j.judged(ResourceUser, u.Name, u.Owner, engine.KindBinding); ok {
			rs = append(rs, resource{name: u.Name, mark: h, keys: strings.Join(u.KeyIDs, keySep)})
		}
	}
	return j.merge(ctx, j.users, names, rs)
}

// state is the bucket backend's part of r (zero for other records).
func state(r *engine.Record) engine.BucketState {
	if r.Bucket == nil {
		return engine.BucketState{}
	}
	return *r.Bucket
}

func recordName(r *engine.Record) string { return string(r.Kind) + "/" + r.ID }

// record judges a record on its own, res being the judged resource of its
// name or nil: an operation in progress is noted, an upstream record
// compared with its upstream, a ready one with its resources.
func (j *judge) record(ctx context.Context, r *engine.Record, res *resource) error {
	if state(r).Owner != "" && r.Phase != engine.PhaseDeleted && !r.Op.Finished() {
		j.rep.Skipped = append(j.rep.Skipped, Skipped{Record: recordName(r),
			Reason: fmt.Sprintf("%s in progress (operation %s): neither the record nor its resources are judged; audit again when it has finished", r.Op.Type, r.Op.ID)})
	}
	if r.Upstream != nil {
		j.upstream(ctx, r)
		return nil
	}
	return j.missing(ctx, r, res)
}

// carries reports whether r carries res's mark, res being of kind's
// resources.
func carries(res *resource, kind engine.Kind, r *engine.Record) bool {
	h, k, ok := markOf(state(r).Owner)
	return ok && k == kind && h == res.mark
}

// markOf returns the hash and kind of an owner mark, and false for a mark
// this version does not make.
func markOf(mark string) (driver.MarkHash, engine.Kind, bool) {
	k, h, ok := driver.ParseOwnerMark(mark)
	return h, engine.Kind(k), ok
}

// owner settles the verdict of res, which carries r's mark: a live record
// owns it if it names it (or is still at work), and its other keys are
// unknown; a tombstone leaves it a leak, unless a live record owns it.
func (j *judge) owner(res *resource, r *engine.Record) {
	name := r.ResourceName()
	if r.Phase == engine.PhaseDeleted {
		if res.seen == seenNone {
			res.seen, res.gone, res.goneVersion = seenGone, r.ID, r.Version
			res.why = fmt.Sprintf("%s was deleted (%s) but this remains", recordName(r), r.Op.Type)
		}
		return
	}
	res.seen, res.owned, res.why = seenLive, false, ""
	if name != res.name && r.Op.Finished() {
		res.why = fmt.Sprintf("carries the mark of %s, whose resource is named %q", recordName(r), name)
		return
	}
	res.owned = true
	if res.keys == "" || !r.Op.Finished() {
		return
	}
	for k := range strings.SplitSeq(res.keys, keySep) {
		if k == state(r).AccessKeyID {
			continue
		}
		detail := fmt.Sprintf("the record holds key %s", state(r).AccessKeyID)
		if state(r).AccessKeyID == "" {
			detail = "the record holds no key"
		}
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindUnknownKey, Resource: ResourceKey, Name: k, User: res.name,
			Owner: state(r).Owner, Record: recordName(r), Detail: detail, version: r.Version})
	}
}

// judged reports whether a resource of this type, name and mark is ours
// to judge, with its mark's hash, and notes why not otherwise.
func (j *judge) judged(resource, name, mark string, kind engine.Kind) (driver.MarkHash, bool) {
	skip := func(reason string) (driver.MarkHash, bool) {
		j.skipResource = append(j.skipResource, Skipped{Resource: resource, Name: name, Reason: reason})
		return driver.MarkHash{}, false
	}
	h, k, ok := markOf(mark)
	switch {
	case !ok:
		return skip(fmt.Sprintf("owner mark %q is not one this version makes", mark))
	case !h.Names(j.prefix, name):
		return skip(fmt.Sprintf("its name does not derive from its owner mark %q under prefix %q", mark, j.prefix))
	case k != kind:
		return skip(fmt.Sprintf("owner mark of a %s: not kept in this store", k))
	}
	return h, true
}

// leak reports res, of s's resources, which no live record owns.
func (j *judge) leak(s *stream, res *resource) {
	why := res.why
	if res.seen == seenNone {
		why = "no record carries its owner mark"
	}
	j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: s.resource, Name: res.name,
		Owner: res.mark.Mark(string(s.kind)), Detail: why})
}

// missing notes a ready record whose resources the inventory lacks, res
// being the judged resource of its name or nil: a candidate, reported
// once the inventory is in if a second look (confirm) agrees.
func (j *judge) missing(ctx context.Context, r *engine.Record, res *resource) error {
	if !r.Op.Finished() || (r.Phase != engine.PhaseReady && !failedCreated(r)) {
		return nil
	}
	if j.noDriver {
		j.skipMissing = append(j.skipMissing, Skipped{Record: recordName(r), Reason: "no storage backend was audited (--bucket-service=false)"})
		return nil
	}
	name := r.ResourceName()
	if !strings.HasPrefix(name, j.prefix+"-") {
		j.skipMissing = append(j.skipMissing, Skipped{Record: recordName(r),
			Reason: fmt.Sprintf("its resource %q is named under another prefix: audit with that --name-prefix", name)})
		return nil
	}
	if f, ok := missingFinding(r, name, res); ok {
		s := j.streamOf(r.Kind)
		s.pending = append(s.pending, candidate{r: trimmed(r), f: f})
	}
	return nil
}

// failedCreated reports a record whose deprovision or unbind failed after
// its resource was created and marked: its resource is judged for a lost
// mark only (a missing one is on its way out).
func failedCreated(r *engine.Record) bool {
	return r.Phase == engine.PhaseFailed && ((r.Kind == engine.KindInstance && state(r).BucketCreated) || (r.Kind == engine.KindBinding && state(r).UserCreated))
}

// candidate is a finding of a missing resource, confirmed once the
// inventory is in (confirmPending), and what it needs of its record.
type candidate struct {
	r *engine.Record
	f Finding
}

// trimmed is what a candidate keeps of its record.
func trimmed(r *engine.Record) *engine.Record {
	t := &engine.Record{Kind: r.Kind, ID: r.ID, Version: r.Version, Phase: r.Phase, Op: engine.Operation{State: r.Op.State},
		Backend: r.Backend}
	if r.Bucket != nil {
		b := *r.Bucket
		t.Bucket = &b
	}
	return t
}

// missingFinding returns the finding of the ready record r, whose
// resource is named name and res the judged resource of that name or
// nil, if the resource is missing or not as r has it.
func missingFinding(r *engine.Record, name string, res *resource) (Finding, bool) {
	var owner string
	if res != nil {
		owner = res.mark.Mark(string(r.Kind))
	}
	switch {
	case r.Kind == engine.KindInstance && (res == nil || owner != state(r).Owner):
		return Finding{Kind: KindMissing, Resource: ResourceBucket, Name: name, Owner: state(r).Owner,
			Record: recordName(r), Detail: "ready instance without its bucket" + otherMark(owner, res != nil),
			Action: "not fixed: an empty bucket would hide that the data is gone; deprovision and provision the instance again from the platform"}, true
	case r.Kind == engine.KindBinding && (res == nil || owner != state(r).Owner):
		return Finding{Kind: KindMissing, Resource: ResourceUser, Name: name, Owner: state(r).Owner,
			Record: recordName(r), Detail: "ready binding without its user" + otherMark(owner, res != nil),
			Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"}, true
	case r.Kind == engine.KindBinding && (res.keys == "" || !slices.Contains(strings.Split(res.keys, keySep), state(r).AccessKeyID)):
		return Finding{Kind: KindMissing, Resource: ResourceKey, Name: state(r).AccessKeyID, User: name, Owner: state(r).Owner,
			Record: recordName(r), Detail: "ready binding whose user lacks the key it handed out",
			Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"}, true
	}
	return Finding{}, false
}

// confirmPending confirms the candidates of every kind. Of a held kind, a
// candidate made before the inventory came out of order is judged again
// against the held resources, one of which may be its own.
func (j *judge) confirmPending(ctx context.Context) error {
	for _, s := range j.streams() {
		for _, c := range s.pending {
			f := c.f
			if s.held {
				if i, ok := slices.BinarySearchFunc(s.rest, c.r.ResourceName(), byName); ok {
					if f, ok = missingFinding(c.r, c.r.ResourceName(), &s.rest[i]); !ok {
						continue
					}
				}
			}
			if err := j.confirm(ctx, c.r, f); err != nil {
				return err
			}
		}
		s.pending = nil
	}
	return nil
}

// confirm reports f, a missing resource of the ready record r, unless a
// second look says otherwise. The inventory's page that lacked it may
// have been read before r was written (a provision that ended in
// between) or r before a deprovision began: f stands only when the
// driver, asked after r was read, still lacks the resource as r has it,
// and r, read again after that, has not changed. The broker changes a
// record before it changes its resources (intent first), so a resource
// its unchanged ready record vouches for that is not there was removed
// behind its back.
func (j *judge) confirm(ctx context.Context, r *engine.Record, f Finding) error {
	req := driver.ObserveRequest{Bucket: state(r).Bucket}
	if r.Kind == engine.KindBinding {
		req = driver.ObserveRequest{UserName: state(r).UserName}
	}
	obs, err := j.drv.Observe(ctx, req)
	if err != nil {
		return fmt.Errorf("look again at the %s of %s: %w", f.Resource, recordName(r), err)
	}
	exists, owner := obs.BucketExists, obs.BucketOwner
	if r.Kind == engine.KindBinding {
		exists, owner = obs.UserExists, obs.UserOwner
	}
	switch {
	case exists && owner != state(r).Owner:
		f = markLost(r, f, owner)
	case r.Phase != engine.PhaseReady:
		return nil // gone, or marked: nothing lost
	case exists && (r.Kind == engine.KindInstance || slices.Contains(obs.KeyIDs, state(r).AccessKeyID)):
		return nil
	}
	now, err := j.store.Get(ctx, r.Kind, r.ID)
	if err != nil {
		return fmt.Errorf("read %s again: %w", recordName(r), err)
	}
	if now.Version != r.Version {
		j.skipMissing = append(j.skipMissing, Skipped{Record: recordName(r),
			Reason: fmt.Sprintf("changed while the audit ran (now %s, %s %s): audit again", now.Phase, now.Op.Type, now.Op.State)})
		return nil
	}
	j.rep.Findings = append(j.rep.Findings, f)
	return nil
}

// markLost turns f, a finding about the resource of r, into the finding
// that it exists without r's mark (owner is the mark it carries, if any):
// the record says it was created and marked, so someone removed or
// replaced the mark. The broker refuses to delete it (internal/ensure),
// and so does Fix.
func markLost(r *engine.Record, f Finding, owner string) Finding {
	f.Kind, f.Name, f.User = KindMarkLost, r.ResourceName(), ""
	f.Resource = ResourceBucket
	undo := "deprovision"
	if r.Kind == engine.KindBinding {
		f.Resource, undo = ResourceUser, "unbind"
	}
	f.Detail = fmt.Sprintf("exists without the owner mark it was created with (removed outside the broker)%s", otherMark(owner, owner != ""))
	f.Action = fmt.Sprintf("not fixed: the broker deletes nothing without its mark, and the %s fails; put the mark %q back, or delete the %s yourself, then %s again",
		undo, state(r).Owner, f.Resource, undo)
	return f
}

func otherMark(owner string, found bool) string {
	if found {
		return fmt.Sprintf(" (one of that name carries mark %q)", owner)
	}
	return ""
}
