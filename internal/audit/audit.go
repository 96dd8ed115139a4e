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

// Run compares the backend with the store and reports the differences. It
// changes nothing.
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
	recs, err := opts.Store.List(ctx, engine.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the store: %w", err)
	}
	// List skips records it cannot read: judged without them, their
	// buckets and users would be leaks, and --fix would delete them.
	if u, ok := opts.Store.(engine.UnreadableReporter); ok {
		if bad := u.Unreadable(); len(bad) > 0 {
			return nil, fmt.Errorf("the store holds %d records it cannot read (the first: %s %s): without them their buckets and users would look leaked; "+
				"repair them with `bucketbroker admin records repair --all`, then audit again", len(bad), bad[0].Kind, bad[0].ID)
		}
	}
	rep := &Report{Prefix: opts.Prefix, Buckets: len(inv.Buckets), Users: len(inv.Users), Records: len(recs),
		Findings: []Finding{}, Skipped: []Skipped{}} // [] in JSON, not null
	j := newJudge(opts.Prefix, recs, rep)
	j.noDriver = opts.Driver == nil
	j.buckets(inv.Buckets)
	j.users(inv.Users)
	j.missing(inv)
	j.upstreams(ctx, opts.Upstreams)
	slices.SortFunc(rep.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.User, b.User), cmp.Compare(a.Name, b.Name))
	})
	return rep, nil
}

// judge holds the store's records, indexed for the comparison.
type judge struct {
	prefix string
	rep    *Report
	// live and gone map an owner mark to its live record, and to its
	// tombstone.
	live, gone map[string]*engine.Record
	recs       []*engine.Record
	// noDriver: no storage backend to compare bucket records with.
	noDriver bool
}

func newJudge(prefix string, recs []*engine.Record, rep *Report) *judge {
	j := &judge{prefix: prefix, rep: rep, live: map[string]*engine.Record{}, gone: map[string]*engine.Record{}, recs: recs}
	for _, r := range recs {
		if r.Owner == "" {
			continue
		}
		if r.Phase == engine.PhaseDeleted {
			j.gone[r.Owner] = r
			continue
		}
		j.live[r.Owner] = r
		if !r.Op.Finished() {
			rep.Skipped = append(rep.Skipped, Skipped{Record: recordName(r),
				Reason: fmt.Sprintf("%s in progress (operation %s): neither the record nor its resources are judged; audit again when it has finished", r.Op.Type, r.Op.ID)})
		}
	}
	return j
}

func recordName(r *engine.Record) string { return string(r.Kind) + "/" + r.ID }

// judged reports whether a resource of this type, name and mark is ours
// to judge, and notes why not otherwise.
func (j *judge) judged(resource, name, mark string, kind engine.Kind) bool {
	skip := func(reason string) bool {
		j.rep.Skipped = append(j.rep.Skipped, Skipped{Resource: resource, Name: name, Reason: reason})
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
func (j *judge) verdict(mark, name string, nameOf func(*engine.Record) string) (*engine.Record, string) {
	if r := j.live[mark]; r != nil {
		if nameOf(r) == name || !r.Op.Finished() {
			return r, ""
		}
		return nil, fmt.Sprintf("carries the mark of %s, whose resource is named %q", recordName(r), nameOf(r))
	}
	if r := j.gone[mark]; r != nil {
		return nil, fmt.Sprintf("%s was deleted (%s) but this remains", recordName(r), r.Op.Type)
	}
	return nil, "no record carries its owner mark"
}

func (j *judge) buckets(bs []driver.OwnedBucket) {
	for _, b := range bs {
		if !j.judged(ResourceBucket, b.Name, b.Owner, engine.KindInstance) {
			continue
		}
		rec, why := j.verdict(b.Owner, b.Name, func(r *engine.Record) string { return r.Bucket })
		if rec != nil {
			continue
		}
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: ResourceBucket, Name: b.Name, Owner: b.Owner, Detail: why})
	}
}

func (j *judge) users(us []driver.OwnedUser) {
	for _, u := range us {
		if !j.judged(ResourceUser, u.Name, u.Owner, engine.KindBinding) {
			continue
		}
		rec, why := j.verdict(u.Owner, u.Name, func(r *engine.Record) string { return r.UserName })
		if rec == nil {
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindLeak, Resource: ResourceUser, Name: u.Name, Owner: u.Owner, Detail: why})
			continue
		}
		if !rec.Op.Finished() {
			continue
		}
		for _, k := range u.KeyIDs {
			if k == rec.AccessKeyID {
				continue
			}
			detail := fmt.Sprintf("the record holds key %s", rec.AccessKeyID)
			if rec.AccessKeyID == "" {
				detail = "the record holds no key"
			}
			j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindUnknownKey, Resource: ResourceKey, Name: k, User: u.Name,
				Owner: u.Owner, Record: recordName(rec), Detail: detail, version: rec.Version})
		}
	}
}

// missing reports ready records whose resources the inventory lacks.
func (j *judge) missing(inv driver.Inventory) {
	buckets := map[string]string{}
	for _, b := range inv.Buckets {
		buckets[b.Name] = b.Owner
	}
	users := map[string]driver.OwnedUser{}
	for _, u := range inv.Users {
		users[u.Name] = u
	}
	for _, r := range j.recs {
		if r.Phase != engine.PhaseReady || !r.Op.Finished() {
			continue
		}
		if r.Upstream != "" {
			continue // j.upstreams
		}
		if j.noDriver {
			j.skip(r, "no storage backend was audited (--bucket-service=false)")
			continue
		}
		name := r.Bucket
		if r.Kind == engine.KindBinding {
			name = r.UserName
		}
		if !strings.HasPrefix(name, j.prefix+"-") {
			j.rep.Skipped = append(j.rep.Skipped, Skipped{Record: recordName(r),
				Reason: fmt.Sprintf("its resource %q is named under another prefix: audit with that --name-prefix", name)})
			continue
		}
		switch r.Kind {
		case engine.KindInstance:
			if owner, ok := buckets[name]; !ok || owner != r.Owner {
				j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: ResourceBucket, Name: name, Owner: r.Owner,
					Record: recordName(r), Detail: "ready instance without its bucket" + otherMark(owner, ok),
					Action: "not fixed: an empty bucket would hide that the data is gone; deprovision and provision the instance again from the platform"})
			}
		case engine.KindBinding:
			u, ok := users[name]
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
}

func otherMark(owner string, found bool) string {
	if found {
		return fmt.Sprintf(" (one of that name carries mark %q)", owner)
	}
	return ""
}
