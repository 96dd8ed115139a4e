package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Store is the part of engine.Store the audit reads.
type Store interface {
	List(ctx context.Context, opts engine.ListOptions) ([]*engine.Record, error)
}

// Driver is what the audit needs of a driver: the inventory, and the calls
// that remove a leak, each of which checks the owner mark itself.
type Driver interface {
	driver.Auditable
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
}

// Kind is the kind of a finding.
type Kind string

// Kinds of findings.
const (
	KindLeak       Kind = "leak"
	KindMissing    Kind = "missing"
	KindUnknownKey Kind = "unknown-key"
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

// pageSize is how many records the audit reads from the store at once:
// the records it holds at any time (see Run).
var pageSize = 1000

// Run compares the backend with the store and reports the differences. It
// changes nothing.
//
// The inventory is held whole (the driver returns it so); the store's
// records are read a page at a time and judged as they come, none kept
// once its page is judged: what the audit holds beside the inventory is
// a verdict per marked resource, a page of records, and the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Store == nil || (opts.Driver == nil && len(opts.Upstreams) == 0) {
		return nil, errors.New("audit: a store and a driver or an upstream are required")
	}
	if err := driver.ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	// The backend first: see the package documentation.
	var inv driver.Inventory
	if opts.Driver != nil {
		var err error
		if inv, err = opts.Driver.Inventory(ctx, opts.Prefix+"-"); err != nil {
			return nil, fmt.Errorf("list the backend: %w", err)
		}
	}
	rep := &Report{Prefix: opts.Prefix, Buckets: len(inv.Buckets), Users: len(inv.Users),
		Findings: []Finding{}, Skipped: []Skipped{}} // [] in JSON, not null
	j := newJudge(opts.Prefix, inv, rep)
	j.noDriver = opts.Driver == nil
	j.ups = map[string]Upstream{}
	for _, u := range opts.Upstreams {
		j.ups[u.Name()] = u
	}
	err := eachPage(ctx, opts.Store, func(page []*engine.Record) error {
		// List skips records it cannot read: judged without them, their
		// buckets and users would be leaks, and --fix would delete them.
		if err := refuseUnreadable(opts.Store); err != nil {
			return err
		}
		rep.Records += len(page)
		for _, r := range page {
			j.record(ctx, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	j.buckets()
	j.users()
	rep.Skipped = slices.Concat(rep.Skipped, j.skipResource, j.skipMissing, j.skipUpstream)
	slices.SortFunc(rep.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.User, b.User), cmp.Compare(a.Name, b.Name))
	})
	return rep, nil
}

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

// judge holds the inventory and, for each owner mark a judged resource
// carries, what the records said of it; the records themselves are judged
// a page at a time (record) and not kept.
type judge struct {
	prefix string
	rep    *Report
	inv    driver.Inventory
	// judgedBuckets and judgedUsers are the inventory's indexes of the
	// resources judged; marks holds what the records say of their marks.
	judgedBuckets, judgedUsers []int
	marks                      map[string]*markState
	ups                        map[string]Upstream
	// noDriver: no storage backend to compare bucket records with.
	noDriver bool
	// Skipped in the order the report has always listed them: records in
	// progress (in rep.Skipped), resources not judged, records not
	// compared with the backend, then with their upstream.
	skipResource, skipMissing, skipUpstream []Skipped
}

// markState is what the records say of one owner mark: its live record
// and its tombstone, either nil.
type markState struct {
	live *owner
	gone *owner
}

// owner is what the audit keeps of a record that owns a judged resource.
type owner struct {
	record    string // "kind/id"
	name      string // its bucket or user
	opType    engine.OpType
	finished  bool
	accessKey string
	version   int64
}

func newJudge(prefix string, inv driver.Inventory, rep *Report) *judge {
	j := &judge{prefix: prefix, rep: rep, inv: inv, marks: map[string]*markState{}}
	// Sorted by name (driver.Inventory), for missing's look-ups.
	slices.SortFunc(j.inv.Buckets, func(a, b driver.OwnedBucket) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(j.inv.Users, func(a, b driver.OwnedUser) int { return strings.Compare(a.Name, b.Name) })
	for i, b := range j.inv.Buckets {
		if j.judged(ResourceBucket, b.Name, b.Owner, engine.KindInstance) {
			j.judgedBuckets = append(j.judgedBuckets, i)
			j.marks[b.Owner] = &markState{}
		}
	}
	for i, u := range j.inv.Users {
		if j.judged(ResourceUser, u.Name, u.Owner, engine.KindBinding) {
			j.judgedUsers = append(j.judgedUsers, i)
			j.marks[u.Owner] = &markState{}
		}
	}
	return j
}

// record judges one record of the store: notes it as the owner of its
// mark, and checks the resources of a ready one.
func (j *judge) record(ctx context.Context, r *engine.Record) {
	if r.Owner != "" {
		if st := j.marks[r.Owner]; st != nil {
			o := &owner{record: recordName(r), name: r.Bucket, opType: r.Op.Type, finished: r.Op.Finished(), accessKey: r.AccessKeyID, version: r.Version}
			if r.Kind == engine.KindBinding {
				o.name = r.UserName
			}
			if r.Phase == engine.PhaseDeleted {
				st.gone = o
			} else {
				st.live = o
			}
		}
		if r.Phase != engine.PhaseDeleted && !r.Op.Finished() {
			j.rep.Skipped = append(j.rep.Skipped, Skipped{Record: recordName(r),
				Reason: fmt.Sprintf("%s in progress (operation %s): neither the record nor its resources are judged; audit again when it has finished", r.Op.Type, r.Op.ID)})
		}
	}
	if r.Upstream != "" {
		j.upstream(ctx, r)
		return
	}
	j.missing(r)
}

func recordName(r *engine.Record) string { return string(r.Kind) + "/" + r.ID }

// judged reports whether a resource of this type, name and mark is ours
// to judge, and notes why not otherwise.
func (j *judge) judged(resource, name, mark string, kind engine.Kind) bool {
	skip := func(reason string) bool {
		j.skipResource = append(j.skipResource, Skipped{Resource: resource, Name: name, Reason: reason})
		return false
	}
	k, ok := driver.ParseOwnerMark(mark)
	switch {
	case !ok:
		return skip(fmt.Sprintf("owner mark %q is not one this version makes", mark))
	case !driver.NameMatchesMark(j.prefix, name, mark):
		return skip(fmt.Sprintf("its name does not derive from its owner mark %q under prefix %q", mark, j.prefix))
	case k != string(kind):
		return skip(fmt.Sprintf("owner mark of a %s: not kept in this store", k))
	}
	return true
}

// verdict returns the live record that owns a resource, or nil and why
// none does.
func (j *judge) verdict(mark, name string) (*owner, string) {
	st := j.marks[mark]
	if r := st.live; r != nil {
		if r.name == name || !r.finished {
			return r, ""
		}
		return nil, fmt.Sprintf("carries the mark of %s, whose resource is named %q", r.record, r.name)
	}
	if r := st.gone; r != nil {
		return nil, fmt.Sprintf("%s was deleted (%s) but this remains", r.record, r.opType)
	}
	return nil, "no record carries its owner mark"
}

func (j *judge) buckets() {
	for _, i := range j.judgedBuckets {
		b := j.inv.Buckets[i]
		if rec, why := j.verdict(b.Owner, b.Name); rec == nil {
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: ResourceBucket, Name: b.Name, Owner: b.Owner, Detail: why})
		}
	}
}

func (j *judge) users() {
	for _, i := range j.judgedUsers {
		u := j.inv.Users[i]
		rec, why := j.verdict(u.Owner, u.Name)
		if rec == nil {
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: ResourceUser, Name: u.Name, Owner: u.Owner, Detail: why})
			continue
		}
		if !rec.finished {
			continue
		}
		for _, k := range u.KeyIDs {
			if k == rec.accessKey {
				continue
			}
			detail := fmt.Sprintf("the record holds key %s", rec.accessKey)
			if rec.accessKey == "" {
				detail = "the record holds no key"
			}
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindUnknownKey, Resource: ResourceKey, Name: k, User: u.Name,
				Owner: u.Owner, Record: rec.record, Detail: detail, version: rec.version})
		}
	}
}

// missing reports a ready record whose resources the inventory lacks.
func (j *judge) missing(r *engine.Record) {
	if r.Phase != engine.PhaseReady || !r.Op.Finished() {
		return
	}
	if j.noDriver {
		j.skipMissing = append(j.skipMissing, Skipped{Record: recordName(r), Reason: "no storage backend was audited (--bucket-service=false)"})
		return
	}
	name := r.Bucket
	if r.Kind == engine.KindBinding {
		name = r.UserName
	}
	if !strings.HasPrefix(name, j.prefix+"-") {
		j.skipMissing = append(j.skipMissing, Skipped{Record: recordName(r),
			Reason: fmt.Sprintf("its resource %q is named under another prefix: audit with that --name-prefix", name)})
		return
	}
	switch r.Kind {
	case engine.KindInstance:
		var owner string
		i, ok := slices.BinarySearchFunc(j.inv.Buckets, name, func(b driver.OwnedBucket, n string) int { return strings.Compare(b.Name, n) })
		if ok {
			owner = j.inv.Buckets[i].Owner
		}
		if !ok || owner != r.Owner {
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceBucket, Name: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready instance without its bucket" + otherMark(owner, ok),
				Action: "not fixed: an empty bucket would hide that the data is gone; deprovision and provision the instance again from the platform"})
		}
	case engine.KindBinding:
		var u driver.OwnedUser
		i, ok := slices.BinarySearchFunc(j.inv.Users, name, func(u driver.OwnedUser, n string) int { return strings.Compare(u.Name, n) })
		if ok {
			u = j.inv.Users[i]
		}
		switch {
		case !ok || u.Owner != r.Owner:
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceUser, Name: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready binding without its user" + otherMark(u.Owner, ok),
				Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"})
		case !slices.Contains(u.KeyIDs, r.AccessKeyID):
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceKey, Name: r.AccessKeyID, User: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready binding whose user lacks the key it handed out",
				Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"})
		}
	}
}

func otherMark(owner string, found bool) string {
	if found {
		return fmt.Sprintf(" (one of that name carries mark %q)", owner)
	}
	return ""
}
