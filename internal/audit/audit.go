package audit

import (
	"bytes"
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
// The inventory is taken from the driver a page at a time
// (driver.InventoryPages) and kept only as the judged resources' names,
// marks and keys; the store's records are read a page at a time and
// judged as they come, each resource's verdict settled by the record
// that carries its mark, none kept once its page is judged: what the
// audit holds is the judged resources, a page of the driver's or of the
// store's, and the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Store == nil || (opts.Driver == nil && len(opts.Upstreams) == 0) {
		return nil, errors.New("audit: a store and a driver or an upstream are required")
	}
	if err := driver.ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	rep := &Report{Prefix: opts.Prefix, Findings: []Finding{}, Skipped: []Skipped{}} // [] in JSON, not null
	j := &judge{prefix: opts.Prefix, rep: rep, noDriver: opts.Driver == nil, ups: map[string]Upstream{}, why: map[*resource]string{}}
	for _, u := range opts.Upstreams {
		j.ups[u.Name()] = u
	}
	// The backend first: see the package documentation.
	if opts.Driver != nil {
		if err := driver.InventoryPages(ctx, opts.Driver, opts.Prefix+"-", j.inventory); err != nil {
			return nil, fmt.Errorf("list the backend: %w", err)
		}
	}
	j.index()
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
	j.leaks(ResourceBucket, engine.KindInstance, j.buckets)
	j.leaks(ResourceUser, engine.KindBinding, j.users)
	slices.SortStableFunc(j.skipResource, func(a, b Skipped) int {
		return cmp.Or(cmp.Compare(resourceOrder[a.Resource], resourceOrder[b.Resource]), cmp.Compare(a.Name, b.Name))
	})
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

// judge holds the judged resources of the inventory and what the records
// have said of them so far; the records themselves are judged a page at
// a time (record) and not kept.
type judge struct {
	prefix string
	rep    *Report
	// buckets and users are the judged resources, sorted by name once the
	// inventory is in (index); bucketMarks and userMarks their indexes
	// sorted by mark.
	buckets, users         []resource
	bucketMarks, userMarks []int32
	// why a resource is a leak, when the record that carries its mark
	// says so (a tombstone, another name): few, so not in resource.
	why map[*resource]string
	ups map[string]Upstream
	// noDriver: no storage backend to compare bucket records with.
	noDriver bool
	// Skipped in the order the report has always listed them: records in
	// progress (in rep.Skipped), resources not judged, records not
	// compared with the backend, then with their upstream.
	skipResource, skipMissing, skipUpstream []Skipped
}

// resource is what the audit keeps of a judged bucket or user: its name,
// mark and keys as the inventory listed them, and the verdict of the
// records read so far. The mark is kept as its hash: its kind is the
// resource's (instance for a bucket, binding for a user, as judged
// requires); the keys as one string.
type resource struct {
	name string
	mark driver.MarkHash
	keys string // a user's access key ids, sorted, keySep between them
	// seen is the record that carries the mark, if one has come: a
	// tombstone, or a live one (which a tombstone does not overrule);
	// owned when a live record owns it.
	seen  seen
	owned bool
}

// keySep separates a user's access key ids in resource.keys.
const keySep = "\x00"

type seen uint8

const (
	seenNone seen = iota
	seenGone
	seenLive
)

// inventory takes one page of the driver's inventory: the resources to
// judge are kept (their names, marks and keys, not the page), the others
// noted as not judged.
func (j *judge) inventory(inv driver.Inventory) error {
	j.rep.Buckets += len(inv.Buckets)
	j.rep.Users += len(inv.Users)
	for _, b := range inv.Buckets {
		if h, ok := j.judged(ResourceBucket, b.Name, b.Owner, engine.KindInstance); ok {
			j.buckets = append(j.buckets, resource{name: b.Name, mark: h})
		}
	}
	for _, u := range inv.Users {
		if h, ok := j.judged(ResourceUser, u.Name, u.Owner, engine.KindBinding); ok {
			j.users = append(j.users, resource{name: u.Name, mark: h, keys: strings.Join(u.KeyIDs, keySep)})
		}
	}
	return nil
}

// index sorts the judged resources by name (the pages are, each; their
// order between them is the backend's) and makes their indexes by mark.
func (j *judge) index() {
	names := func(a, b resource) int { return strings.Compare(a.name, b.name) }
	slices.SortFunc(j.buckets, names)
	slices.SortFunc(j.users, names)
	j.buckets, j.users = slices.Clip(j.buckets), slices.Clip(j.users)
	j.bucketMarks, j.userMarks = marksOf(j.buckets), marksOf(j.users)
}

func marksOf(rs []resource) []int32 {
	idx := make([]int32, len(rs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return bytes.Compare(rs[a].mark[:], rs[b].mark[:]) })
	return idx
}

// carrying returns the indexes, in rs, of the resources that carry mark.
func carrying(rs []resource, byMark []int32, mark driver.MarkHash) []int32 {
	cmpMark := func(i int32, m driver.MarkHash) int { return bytes.Compare(rs[i].mark[:], m[:]) }
	lo, _ := slices.BinarySearchFunc(byMark, mark, cmpMark)
	hi := lo
	for hi < len(byMark) && rs[byMark[hi]].mark == mark {
		hi++
	}
	return byMark[lo:hi]
}

// record judges one record of the store: settles the verdict of the
// resources that carry its mark, and checks the resources of a ready one.
func (j *judge) record(ctx context.Context, r *engine.Record) {
	if r.Owner != "" {
		h, ok := driver.HashOfMark(r.Owner)
		k, _ := driver.ParseOwnerMark(r.Owner)
		switch {
		case ok && k == string(engine.KindInstance):
			for _, i := range carrying(j.buckets, j.bucketMarks, h) {
				j.owner(&j.buckets[i], r)
			}
		case ok && k == string(engine.KindBinding):
			for _, i := range carrying(j.users, j.userMarks, h) {
				j.owner(&j.users[i], r)
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

// owner settles the verdict of res, which carries r's mark: a live record
// owns it if it names it (or is still at work), and its other keys are
// unknown; a tombstone leaves it a leak, unless a live record owns it.
func (j *judge) owner(res *resource, r *engine.Record) {
	name := r.Bucket
	if r.Kind == engine.KindBinding {
		name = r.UserName
	}
	if r.Phase == engine.PhaseDeleted {
		if res.seen == seenNone {
			res.seen = seenGone
			j.why[res] = fmt.Sprintf("%s was deleted (%s) but this remains", recordName(r), r.Op.Type)
		}
		return
	}
	res.seen, res.owned = seenLive, false
	delete(j.why, res)
	if name != res.name && r.Op.Finished() {
		j.why[res] = fmt.Sprintf("carries the mark of %s, whose resource is named %q", recordName(r), name)
		return
	}
	res.owned = true
	if res.keys == "" || !r.Op.Finished() {
		return
	}
	for k := range strings.SplitSeq(res.keys, keySep) {
		if k == r.AccessKeyID {
			continue
		}
		detail := fmt.Sprintf("the record holds key %s", r.AccessKeyID)
		if r.AccessKeyID == "" {
			detail = "the record holds no key"
		}
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindUnknownKey, Resource: ResourceKey, Name: k, User: res.name,
			Owner: r.Owner, Record: recordName(r), Detail: detail, version: r.Version})
	}
}

// judged reports whether a resource of this type, name and mark is ours
// to judge, with its mark's hash, and notes why not otherwise.
func (j *judge) judged(resource, name, mark string, kind engine.Kind) (driver.MarkHash, bool) {
	skip := func(reason string) (driver.MarkHash, bool) {
		j.skipResource = append(j.skipResource, Skipped{Resource: resource, Name: name, Reason: reason})
		return driver.MarkHash{}, false
	}
	k, ok := driver.ParseOwnerMark(mark)
	h, _ := driver.HashOfMark(mark)
	switch {
	case !ok:
		return skip(fmt.Sprintf("owner mark %q is not one this version makes", mark))
	case !driver.NameMatchesMark(j.prefix, name, mark):
		return skip(fmt.Sprintf("its name does not derive from its owner mark %q under prefix %q", mark, j.prefix))
	case k != string(kind):
		return skip(fmt.Sprintf("owner mark of a %s: not kept in this store", k))
	}
	return h, true
}

// leaks reports the judged resources no live record owns; kind is their
// marks' (instance for buckets, binding for users).
func (j *judge) leaks(resourceType string, kind engine.Kind, rs []resource) {
	for i := range rs {
		res := &rs[i]
		if res.owned {
			continue
		}
		why := j.why[res]
		if res.seen == seenNone {
			why = "no record carries its owner mark"
		}
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: resourceType, Name: res.name,
			Owner: driver.MarkOf(string(kind), res.mark), Detail: why})
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
		i, ok := slices.BinarySearchFunc(j.buckets, name, byName)
		if ok {
			owner = driver.MarkOf(string(engine.KindInstance), j.buckets[i].mark)
		}
		if !ok || owner != r.Owner {
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceBucket, Name: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready instance without its bucket" + otherMark(owner, ok),
				Action: "not fixed: an empty bucket would hide that the data is gone; deprovision and provision the instance again from the platform"})
		}
	case engine.KindBinding:
		var u resource
		var owner string
		i, ok := slices.BinarySearchFunc(j.users, name, byName)
		if ok {
			u, owner = j.users[i], driver.MarkOf(string(engine.KindBinding), j.users[i].mark)
		}
		switch {
		case !ok || owner != r.Owner:
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceUser, Name: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready binding without its user" + otherMark(owner, ok),
				Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"})
		case u.keys == "" || !slices.Contains(strings.Split(u.keys, keySep), r.AccessKeyID):
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceKey, Name: r.AccessKeyID, User: name, Owner: r.Owner,
				Record: recordName(r), Detail: "ready binding whose user lacks the key it handed out",
				Action: "not fixed: the application holds a key that cannot be restored; unbind and bind again from the platform"})
		}
	}
}

func byName(res resource, name string) int { return strings.Compare(res.name, name) }

func otherMark(owner string, found bool) string {
	if found {
		return fmt.Sprintf(" (one of that name carries mark %q)", owner)
	}
	return ""
}
