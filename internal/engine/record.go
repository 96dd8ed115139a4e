package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/jsonnest"
)

// Kind is the kind of resource a Record describes.
type Kind string

// Record kinds.
const (
	KindInstance Kind = "instance"
	KindBinding  Kind = "binding"
)

// Phase is where a resource is in its life.
type Phase string

// Phases. A record moves Provisioning -> Ready <-> Updating, and from any
// phase to Deprovisioning -> Deleted. Failed is a provision or bind that gave
// up; a retry of the same request starts it again.
const (
	PhaseProvisioning   Phase = "provisioning"
	PhaseReady          Phase = "ready"
	PhaseUpdating       Phase = "updating"
	PhaseDeprovisioning Phase = "deprovisioning"
	PhaseDeleted        Phase = "deleted"
	PhaseFailed         Phase = "failed"
)

// OpType is the kind of work an operation does.
type OpType string

// Operation types.
const (
	OpProvision   OpType = "provision"
	OpUpdate      OpType = "update"
	OpDeprovision OpType = "deprovision"
	OpBind        OpType = "bind"
	OpUnbind      OpType = "unbind"
)

// OpState is the OSB last_operation state.
type OpState string

// Operation states, spelled as OSB spells them.
const (
	OpInProgress OpState = "in progress"
	OpSucceeded  OpState = "succeeded"
	OpFailed     OpState = "failed"
)

// Operation is the latest piece of work on a record. It stays on the record
// after it ends, so that late polls of last_operation still get an answer.
type Operation struct {
	ID          string  `json:"id"`
	Type        OpType  `json:"type"`
	State       OpState `json:"state"`
	Description string  `json:"description,omitempty"`
	// Async is true when the platform accepted an asynchronous answer.
	Async bool `json:"async,omitempty"`
	// Identity is the X-Broker-API-Originating-Identity header, as sent.
	Identity  string    `json:"identity,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// Deadline is when an unfinished operation gives up and fails.
	Deadline time.Time `json:"deadline"`
	EndedAt  time.Time `json:"endedAt,omitzero"`
	// Target is the request an update applies (plan and parameters).
	Target *Request `json:"target,omitempty"`
	// Sent is what the platform's request sent for a provision or update,
	// for a backend that forwards it as sent (Target and Request hold the
	// merged, canonical state instead). Nil for other operations.
	Sent *Sent `json:"sent,omitempty"`
	// Refused marks a failed operation that the backend refused for good
	// (ErrRefused: a 4xx no retry fixes): the request's error, not
	// the broker's, answered 422 instead of 500.
	Refused bool `json:"refused,omitempty"`
}

// Sent is the part of a platform's provision or update request that a
// backend may forward as the platform sent it. Each field is empty when
// the request had none. A provision's parameters and context are its
// record's Request (as sent), so its Sent holds maintenance_info only.
type Sent struct {
	// Parameters is the canonical JSON of the request's parameters (an
	// update's: only those the platform changes).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Context is the request's context object, as sent.
	Context json.RawMessage `json:"context,omitempty"`
	// Maintenance is the request's maintenance_info.version.
	Maintenance string `json:"maintenance,omitempty"`
}

func (s *Sent) clone() *Sent {
	if s == nil {
		return nil
	}
	c := *s
	c.Parameters, c.Context = cloneBytes(s.Parameters), cloneBytes(s.Context)
	return &c
}

// Finished reports whether the operation has ended.
func (o Operation) Finished() bool { return o.State != OpInProgress }

// Request is the canonical form of what a platform asked for. Its
// fingerprint decides whether a re-sent request is the same request.
type Request struct {
	ServiceID string `json:"serviceId"`
	PlanID    string `json:"planId"`
	// Parameters is the canonical JSON of the parameters object (sorted keys,
	// no insignificant white space), or empty.
	Parameters       json.RawMessage `json:"parameters,omitempty"`
	OrganizationGUID string          `json:"organizationGuid,omitempty"`
	SpaceGUID        string          `json:"spaceGuid,omitempty"`
	// Context is the OSB context object, kept for GET; not fingerprinted.
	Context json.RawMessage `json:"context,omitempty"`
	// Maintenance is the plan's maintenance_info.version an instance was
	// provisioned or upgraded at; not fingerprinted.
	Maintenance string `json:"maintenance,omitempty"`
	// Predecessor is the binding a binding rotates (empty: none); not
	// fingerprinted, compared beside the fingerprint.
	Predecessor string `json:"predecessor,omitempty"`
	// AppGUID and BindResource are for bindings.
	AppGUID      string          `json:"appGuid,omitempty"`
	BindResource json.RawMessage `json:"bindResource,omitempty"`
}

// Record is the durable state of one service instance or binding. It is
// written before any backend call is made for it (intent first), and every
// change is a compare-and-swap on Version.
type Record struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
	// InstanceID is the parent instance of a binding.
	InstanceID string `json:"instanceId,omitempty"`
	// Fingerprint is the hash of the canonical create request.
	Fingerprint string    `json:"fingerprint"`
	Request     Request   `json:"request"`
	Phase       Phase     `json:"phase"`
	Op          Operation `json:"op"`

	// Backend names the backend that carries out the record's operations
	// (Backend.Name). The part that follows of that backend holds its
	// state; the other parts are nil.
	Backend string `json:"backend"`
	// Bucket is the bucket backend's part (internal/bucket).
	Bucket *BucketState `json:"bucketState,omitempty"`
	// Upstream is an upstream backend's part (internal/upstream).
	Upstream *UpstreamState `json:"upstreamState,omitempty"`
	// DashboardURL is the instance's dashboard_url, when its backend gave
	// one.
	DashboardURL string `json:"dashboardUrl,omitempty"`
	// SealedSecret is a binding's secret (a bucket binding's secret access
	// key, an upstream binding's credentials), encrypted with the engine's
	// secret box (AES-GCM). The plain secret is never stored.
	SealedSecret []byte `json:"sealedSecret,omitempty"`

	// History holds the operations before Op, newest first, so that a late
	// poll for an earlier operation still gets its answer.
	History []Operation `json:"history,omitempty"`

	// Lease names the engine (replica) driving the unfinished operation,
	// until LeaseUntil. Another replica takes over only after it expires,
	// so that the steps of one record never run in two places at once.
	Lease      string    `json:"lease,omitempty"`
	LeaseUntil time.Time `json:"leaseUntil,omitzero"`

	// Version is incremented by every successful store write.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// BucketState is the bucket backend's part of a record: the names of the
// bucket and user it makes, the owner mark they carry, and what the record
// knows of their creation (internal/ensure).
type BucketState struct {
	// Bucket is the bucket: an instance's own, or a binding's instance's.
	Bucket string `json:"bucket"`
	// Owner is the owner mark on the resources of this record.
	Owner string `json:"owner"`
	// BucketAttempted is set, durably, before the first attempt to create
	// the bucket. It lets a retry adopt an unmarked bucket it created
	// itself, and a deprovision mark such a bucket and delete it.
	BucketAttempted bool `json:"bucketAttempted,omitempty"`
	// BucketCreated is set in the write that ends a successful provision:
	// the bucket was created and carries Owner. Until then (the crash
	// window between the create call and that write, or a provision that
	// failed) an unmarked bucket under the name may be this record's own
	// and is adopted; from then on a bucket without the mark was changed
	// by someone, and is never adopted or deleted (internal/ensure's
	// Creation).
	BucketCreated bool `json:"bucketCreated,omitempty"`

	// UserName, UserAttempted, UserCreated, Access and AccessKeyID are
	// for bindings.
	UserName string `json:"userName,omitempty"`
	// UserAttempted is set, durably, before the first attempt to create the
	// user, and only after a look showed the name free (or carrying this
	// binding's mark). It lets a retry adopt an unmarked user it created
	// itself: on a backend that marks users in a second call, a crash in
	// between leaves one. An unbind marks such a user and deletes it, then
	// clears the flag. Where the driver says the backend marks a new user
	// in the same write (ensure.UserLookNeeded), the bind neither looks nor
	// sets it: no user of ours is ever unmarked there.
	UserAttempted bool `json:"userAttempted,omitempty"`
	// UserCreated is BucketCreated for the binding's user: set in the
	// write that ends a successful bind (where no attempt is recorded,
	// too), cleared with UserAttempted by the unbind that revoked it.
	UserCreated bool   `json:"userCreated,omitempty"`
	Access      string `json:"access,omitempty"`
	// AccessKeyID is the key whose secret the record holds, sealed
	// (Record.SealedSecret).
	AccessKeyID string `json:"accessKeyId,omitempty"`
}

// UpstreamState is an upstream backend's part of a record. An upstream
// binding's credentials, the upstream's JSON object, are sealed in
// Record.SealedSecret.
type UpstreamState struct {
	// Attempted is set, durably, before the first request that creates
	// the instance or binding upstream (under this record's id): a
	// duplicate answer (409, "name taken") then means "ours, look and
	// adopt". A deprovision or unbind that deleted it clears it.
	Attempted bool `json:"attempted,omitempty"`
	// Op is the upstream's operation that the record's operation waits
	// for, recorded before it is polled (zero: none).
	Op UpstreamOp `json:"op,omitzero"`
}

// UpstreamOp is an upstream's asynchronous operation: its answer 202 to a
// request of the record's operation OpID, and the operation string it
// carried (empty when it carried none), which every poll sends back.
type UpstreamOp struct {
	OpID      string `json:"opId"`
	Operation string `json:"operation,omitempty"`
}

// ResourceName is the name of the record's resource at its backend, the
// name a listing by name (ListOptions.ByName) orders it by: a bucket
// instance's bucket, a bucket binding's user; empty for other records.
func (r *Record) ResourceName() string {
	switch {
	case r.Bucket == nil:
		return ""
	case r.Kind == KindBinding:
		return r.Bucket.UserName
	default:
		return r.Bucket.Bucket
	}
}

// resourceAttrs name the record's resource in log lines.
func (r *Record) resourceAttrs() []any {
	switch {
	case r.Bucket != nil && r.Kind == KindBinding:
		return []any{"user", r.Bucket.UserName}
	case r.Bucket != nil:
		return []any{"bucket", r.Bucket.Bucket}
	default:
		return []any{"backend", r.Backend}
	}
}

// startDeletion moves the record to deprovisioning, for a deprovision or
// an unbind.
func (r *Record) startDeletion() { r.Phase = PhaseDeprovisioning }

// reuse readies a deleted record for its id's next creation: the id may
// come back for another service, so nothing of the backend it had stays.
func (r *Record) reuse(backend string) {
	r.Backend, r.Bucket, r.Upstream = backend, nil, nil
	r.DashboardURL, r.SealedSecret = "", nil
}

// Clone returns a deep copy, so that callers can change it freely.
func (r *Record) Clone() *Record {
	c := *r
	c.SealedSecret = cloneBytes(r.SealedSecret)
	if r.Bucket != nil {
		b := *r.Bucket
		c.Bucket = &b
	}
	if r.Upstream != nil {
		u := *r.Upstream
		c.Upstream = &u
	}
	c.Request = r.Request.clone()
	if r.Op.Target != nil {
		t := r.Op.Target.clone()
		c.Op.Target = &t
	}
	c.Op.Sent = r.Op.Sent.clone()
	c.History = append([]Operation(nil), r.History...)
	return &c
}

// maxHistory bounds Record.History.
const maxHistory = 8

// startOp makes op the record's operation, keeping the previous one in the
// history.
func (r *Record) startOp(op Operation) {
	if r.Op.ID != "" {
		prev := r.Op
		prev.Target, prev.Sent = nil, nil
		if !prev.Finished() {
			// A poll for the halted operation must not see it run forever.
			prev.State, prev.EndedAt = OpFailed, op.StartedAt
			prev.Description = fmt.Sprintf("%s halted by %s", prev.Type, op.Type)
		}
		r.History = append([]Operation{prev}, r.History...)
		if len(r.History) > maxHistory {
			r.History = r.History[:maxHistory]
		}
	}
	r.Op = op
}

// findOp returns the operation with the given id: the current one or one in
// the history. An empty id means the current one.
func (r *Record) findOp(id string) (Operation, bool) {
	if id == "" || id == r.Op.ID {
		return r.Op, true
	}
	for _, o := range r.History {
		if o.ID == id {
			return o, true
		}
	}
	return Operation{}, false
}

func (q Request) clone() Request {
	q.Parameters = cloneBytes(q.Parameters)
	q.Context = cloneBytes(q.Context)
	q.BindResource = cloneBytes(q.BindResource)
	return q
}

func cloneBytes[T ~[]byte](b T) T {
	if b == nil {
		return nil
	}
	return append(T(nil), b...)
}

// Limits of the free-form JSON a request carries (parameters, context,
// bind_resource) and the engine keeps in its record. A record nests each of
// them a few levels deep, so a value near encoding/json's own nesting limit
// (10000) would be accepted and stored, and then could never be read back.
// The door refuses anything beyond these limits with 400, and the engine
// checks them again before it writes (the merged parameters of an update
// included); the store refuses to write a record it could not read back.
const (
	// MaxFreeFormDepth is the deepest nesting of objects and arrays one
	// field may have; the object itself is level 1.
	MaxFreeFormDepth = 32
	// MaxFreeFormBytes is the largest one field may be, as sent.
	MaxFreeFormBytes = 64 << 10
)

// CheckFreeForm reports whether raw, a JSON value, stays within
// MaxFreeFormDepth and MaxFreeFormBytes. name goes into the message, which
// never repeats the value.
func CheckFreeForm(name string, raw []byte) error {
	if len(raw) > MaxFreeFormBytes {
		return fmt.Errorf("%s is %d bytes, more than the %d allowed", name, len(raw), MaxFreeFormBytes)
	}
	if d, over := jsonnest.Exceeds(raw, MaxFreeFormDepth); over {
		return fmt.Errorf("%s nests objects and arrays %d levels deep, more than the %d allowed", name, d, MaxFreeFormDepth)
	}
	return nil
}

// UnreadableRecord is a stored record that cannot be decoded: damaged or
// written outside bucketbroker (beyond the store's limits, or not a
// record). Stores skip it in List (so that one such record never stops
// start-up, the sweep or another record's operation) and report it.
type UnreadableRecord struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
	// InstanceID is the instance of a binding, from the store's column.
	InstanceID string `json:"instanceId,omitempty"`
	Version    int64  `json:"version"`
	// Error says why it cannot be decoded.
	Error string `json:"error"`
}

// UnreadableReporter is a Store that skips unreadable records in List and
// reports those it has come across.
type UnreadableReporter interface {
	// Unreadable returns the records the store's reads found unreadable
	// and have not since found readable, ordered by kind and id.
	Unreadable() []UnreadableRecord
}

// checkFreeForm applies CheckFreeForm to every free-form field of r, as
// the engine will store it (an update's merged parameters included).
func checkFreeForm(r Request) error {
	for _, f := range []struct {
		name string
		raw  []byte
	}{{"parameters", r.Parameters}, {"context", r.Context}, {"bind_resource", r.BindResource}} {
		if err := CheckFreeForm(f.name, f.raw); err != nil {
			return invalidf("%v", err)
		}
	}
	return nil
}

// reportUnreadable logs each record the store skipped as unreadable, once
// per version, and forgets those that read again (repaired since: the
// store's Get then takes them off its list too). The sweep calls it, so
// that an operator hears of such a record within a sweep interval.
func (e *Engine) reportUnreadable(ctx context.Context) {
	rep, ok := e.store.(UnreadableReporter)
	if !ok {
		return
	}
	seen := map[string]bool{}
	for _, u := range rep.Unreadable() {
		if _, err := e.store.Get(ctx, u.Kind, u.ID); err == nil || errors.Is(err, ErrNotFound) || ctx.Err() != nil {
			continue
		}
		k := key(u.Kind, u.ID)
		seen[k] = true
		e.mu.Lock()
		logged, known := e.unreadable[k]
		if e.unreadable == nil {
			e.unreadable = map[string]int64{}
		}
		e.unreadable[k] = u.Version
		e.mu.Unlock()
		if !known || logged != u.Version {
			e.log.Error("Record cannot be read and is skipped; see it with `bucketbroker admin records`, repair it with `bucketbroker admin records repair`",
				"kind", u.Kind, "id", u.ID, "instance", u.InstanceID, "version", u.Version, "error", u.Error)
		}
	}
	e.mu.Lock()
	for k := range e.unreadable {
		if !seen[k] {
			delete(e.unreadable, k)
		}
	}
	e.mu.Unlock()
}

// unreadableBindings returns the ids of the instance's bindings that the
// store skipped as unreadable: a deprovision must not delete the bucket
// while one of them may still hold a live credential.
func (e *Engine) unreadableBindings(instanceID string) []string {
	rep, ok := e.store.(UnreadableReporter)
	if !ok {
		return nil
	}
	var ids []string
	for _, u := range rep.Unreadable() {
		if u.Kind == KindBinding && u.InstanceID == instanceID {
			ids = append(ids, u.ID)
		}
	}
	return ids
}
