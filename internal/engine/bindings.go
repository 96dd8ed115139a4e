package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Bind creates a credential scoped to the instance's bucket, or answers a
// duplicate from the stored record: the same credentials, never a second key.
func (e *Engine) Bind(ctx context.Context, req BindRequest) (BindResult, error) {
	b, err := e.newBindCall(req)
	if err != nil {
		return BindResult{}, err
	}
	rec, created, err := e.recordCreation(ctx, creation{
		kind: KindBinding, id: req.BindingID, op: OpBind,
		same:  func(rec *Record) bool { return rec.Fingerprint == b.fp && rec.Request.Predecessor == b.r.Predecessor },
		check: b.check,
		fresh: func() (*Record, error) { return b.fresh(ctx) },
		again: func(rec *Record) error { return b.again(ctx, rec) },
	})
	if err != nil {
		return BindResult{}, err
	}
	if created {
		return e.bindStarted(ctx, rec, req.AcceptsIncomplete)
	}
	switch rec.Phase {
	case PhaseProvisioning:
		res, err := e.inFlight(ctx, rec, req.AcceptsIncomplete)
		return e.withCredentials(ctx, rec, res, err)
	case PhaseReady:
		return e.bindResult(rec, Result{Outcome: OutcomeOK})
	default:
		return BindResult{}, fmt.Errorf("%w: binding %s is being deleted, or its unbind failed", ErrConcurrency, req.BindingID)
	}
}

// bindCall is one Bind request on its way to the record: the canonical
// request and its fingerprint, the plan, and, once check has run, the
// access a new binding gets. Its methods are the parts of recordCreation's
// loop (see creation).
type bindCall struct {
	e    *Engine
	req  BindRequest
	plan *catalog.Plan
	r    Request
	fp   string
	how  answering
	// up names the upstream serving the service, empty for buckets.
	up string
	bp bindingParams
	// access is the new binding's, once check ran.
	access driver.Access
}

func (e *Engine) newBindCall(req BindRequest) (*bindCall, error) {
	if req.BindingID == "" || req.InstanceID == "" {
		return nil, invalidf("instance and binding ids are required")
	}
	plan, err := e.plan(req.ServiceID, req.PlanID)
	if err != nil {
		return nil, err
	}
	params, err := canonicalObject(req.Parameters)
	if err != nil {
		return nil, invalidf("parameters: %v", err)
	}
	bindResource, err := canonicalObject(req.BindResource)
	if err != nil {
		return nil, invalidf("bind_resource: %v", err)
	}
	r := Request{ServiceID: req.ServiceID, PlanID: req.PlanID, Parameters: params,
		AppGUID: req.AppGUID, BindResource: bindResource, Context: req.Context, Predecessor: req.PredecessorBindingID}
	return &bindCall{e: e, req: req, plan: plan, r: r, fp: fingerprint(req.InstanceID, r),
		how: e.answering(req.AcceptsIncomplete, nil), up: e.upstreamOf(req.ServiceID)}, nil
}

// check runs before anything is written or answered, except for an exact
// replay of a live binding (see creation.check).
func (b *bindCall) check() error {
	plan, pred := b.plan, b.r.Predecessor
	if err := plan.Validate(catalog.ForBind, b.r.Parameters); err != nil {
		return invalidf("%v", err)
	}
	if b.up != "" {
		return checkUpstreamBind(plan, b.r, b.req.BindingID)
	}
	if err := decodeParams(b.r.Parameters, &b.bp); err != nil {
		return invalidf("parameters: %v", err)
	}
	b.access = plan.Settings().DefaultAccess()
	if b.bp.Access != "" {
		b.access = driver.Access(b.bp.Access)
	}
	if !plan.Settings().AllowsAccess(b.access) {
		return invalidf("plan %q does not allow %s bindings", plan.Name, b.access)
	}
	if pred != "" && !plan.Rotatable() {
		return invalidf("plan %q does not allow binding rotation", plan.Name)
	}
	if pred == b.req.BindingID && pred != "" {
		return invalidf("binding %s cannot rotate itself", pred)
	}
	return checkFreeForm(b.r)
}

// rotation returns the access of a new binding: a rotation's is its
// predecessor's, looked up only when the binding is recorded anew (a
// replay is answered from its record, whatever became of the predecessor
// since).
func (b *bindCall) rotation(ctx context.Context) (driver.Access, error) {
	pred := b.r.Predecessor
	if pred == "" {
		return b.access, nil
	}
	p, err := b.e.store.Get(ctx, KindBinding, pred)
	if errors.Is(err, ErrNotFound) || (err == nil && (p.InstanceID != b.req.InstanceID || p.Phase != PhaseReady)) {
		return "", invalidf("predecessor binding %s of instance %s does not exist, or is being made or deleted", pred, b.req.InstanceID)
	} else if err != nil {
		return "", b.e.storeErr(ctx, err)
	}
	if b.bp.Access != "" && driver.Access(b.bp.Access) != driver.Access(p.Access) {
		return "", invalidf("a rotation keeps its predecessor's access (%s); the parameters ask for %s", p.Access, b.bp.Access)
	}
	return driver.Access(p.Access), nil
}

// fresh makes the record of a binding id never seen.
func (b *bindCall) fresh(ctx context.Context) (*Record, error) {
	inst, err := b.e.bindableInstance(ctx, b.req)
	if err != nil {
		return nil, err
	}
	access, err := b.rotation(ctx)
	if err != nil {
		return nil, err
	}
	rec := b.e.newBinding(b.req, inst, b.r, b.fp, access)
	if rec.Upstream = b.up; b.up != "" {
		rec.UserName, rec.Owner = "", ""
		return rec, nil
	}
	rec.UserAttempted = b.e.userFree(ctx, rec, b.how)
	return rec, nil
}

// again makes a deleted or failed binding's record the new request's.
func (b *bindCall) again(ctx context.Context, rec *Record) error {
	inst, err := b.e.bindableInstance(ctx, b.req)
	if err != nil {
		return err
	}
	access, err := b.rotation(ctx)
	if err != nil {
		return err
	}
	rec.UpstreamOp = UpstreamOp{}
	if rec.Phase == PhaseDeleted {
		b.reuseDeleted(ctx, rec)
	}
	rec.InstanceID, rec.Bucket, rec.Request, rec.Fingerprint = inst.ID, inst.Bucket, b.r, b.fp
	rec.Access, rec.Phase = string(access), PhaseProvisioning
	rec.startOp(b.e.newOp(OpBind, b.req.AcceptsIncomplete, b.req.Identity))
	return nil
}

// reuseDeleted readies a deleted binding's record for its id's next bind.
func (b *bindCall) reuseDeleted(ctx context.Context, rec *Record) {
	rec.AccessKeyID, rec.SealedSecret = "", nil
	rec.UserCreated = false
	if b.up != "" || rec.Upstream != "" {
		// The id may come back for another service: the names are those
		// of the service asked for now.
		rec.Upstream, rec.UpstreamAttempted = b.up, false
		rec.UserAttempted = false
		rec.UserName, rec.Owner = "", ""
		if b.up == "" {
			rec.UserName, rec.Owner = driver.UserName(b.e.prefix, string(KindBinding), rec.ID), driver.OwnerMark(string(KindBinding), rec.ID)
			rec.UserAttempted = b.e.userFree(ctx, rec, b.how)
		}
		return
	}
	// An unbind leaves nothing of ours under the name: look again, as for
	// a new binding.
	rec.UserAttempted = b.e.userFree(ctx, rec, b.how)
}

// userFree looks, before the intent is recorded, whether the binding's user
// name is free (or already carries this binding's mark). Only then may the
// bind adopt an unmarked user under that name later. As bucketFree: when
// the backend cannot tell now, or the request is asynchronous, the bind's
// worker looks first. Where the backend marks a new user in the same write
// (ensure.UserLookNeeded), nobody looks and no attempt is recorded.
func (e *Engine) userFree(ctx context.Context, rec *Record, how answering) bool {
	if how == answerAsync || !ensure.UserLookNeeded(e.driver) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, e.lookTimeout(how))
	defer cancel()
	v, err := ensure.Look(ctx, e.driver, ensure.Names{User: rec.UserName, Owner: rec.Owner})
	return err == nil && v.UserFree
}

func (e *Engine) newBinding(req BindRequest, inst *Record, r Request, fp string, access driver.Access) *Record {
	now := time.Now().UTC()
	return &Record{
		Kind: KindBinding, ID: req.BindingID, InstanceID: inst.ID, Fingerprint: fp, Request: r,
		Phase: PhaseProvisioning, Op: e.newOp(OpBind, req.AcceptsIncomplete, req.Identity),
		Bucket: inst.Bucket, UserName: driver.UserName(e.prefix, string(KindBinding), req.BindingID),
		Owner: driver.OwnerMark(string(KindBinding), req.BindingID), Access: string(access),
		Lease: e.replica, LeaseUntil: now.Add(e.leaseTTL),
		CreatedAt: now, UpdatedAt: now,
	}
}

// bindableInstance returns the instance a new binding may be made for.
func (e *Engine) bindableInstance(ctx context.Context, req BindRequest) (*Record, error) {
	inst, err := e.store.Get(ctx, KindInstance, req.InstanceID)
	if errors.Is(err, ErrNotFound) {
		return nil, invalidf("instance %s does not exist", req.InstanceID)
	} else if err != nil {
		return nil, e.storeErr(ctx, err)
	}
	switch inst.Phase {
	case PhaseReady, PhaseUpdating:
	case PhaseDeleted:
		return nil, invalidf("instance %s does not exist", req.InstanceID)
	case PhaseFailed:
		return nil, fmt.Errorf("%w: instance %s failed; it cannot be bound", ErrUnprocessable, req.InstanceID)
	default:
		return nil, fmt.Errorf("%w: instance %s is being %sed", ErrConcurrency, req.InstanceID, inst.Op.Type)
	}
	if inst.Request.ServiceID != req.ServiceID {
		return nil, invalidf("service_id %q is not the instance's service", req.ServiceID)
	}
	return inst, nil
}

// bindStarted starts the bind this request recorded, unless the instance
// changed in the meantime so that it must not: it began to deprovision, or
// to change to a plan that does not allow the binding's access. Both of
// those look at the bindings after they are recorded, and this looks at the
// instance after the binding is recorded: one of the two sees the other.
func (e *Engine) bindStarted(ctx context.Context, rec *Record, async bool) (BindResult, error) {
	inst, err := e.store.Get(ctx, KindInstance, rec.InstanceID)
	if err != nil {
		return BindResult{}, e.storeErr(ctx, err)
	}
	if refused := e.refuseBind(inst, rec); refused != nil {
		rec.Phase = PhaseDeleted
		// Nothing was attempted: a later bind looks again.
		rec.UserAttempted = false
		rec.Op.State, rec.Op.Description, rec.Op.EndedAt = OpFailed, "bind failed: "+refused.Error(), time.Now().UTC()
		if err := e.save(ctx, rec); err != nil && !errors.Is(err, ErrStale) {
			return BindResult{}, e.storeErr(ctx, err)
		}
		return BindResult{}, refused
	}
	crashpoint.Hit(crashpoint.BindRecordWritten)
	e.log.Info("Binding", "id", rec.ID, "instance", rec.InstanceID, "user", rec.UserName, "access", rec.Access, "operation", rec.Op.ID)
	res, end, err := e.startedRecord(ctx, rec, OutcomeCreated, e.answering(async, nil))
	if end != nil {
		rec = end
	}
	return e.withCredentials(ctx, rec, res, err)
}

// refuseBind says why a binding just recorded must not be made, or nil.
func (e *Engine) refuseBind(inst, b *Record) error {
	if inst.Phase == PhaseDeprovisioning || inst.Phase == PhaseDeleted {
		return fmt.Errorf("%w: instance %s is being deprovisioned", ErrConcurrency, inst.ID)
	}
	planID := inst.Request.PlanID
	if inst.Phase == PhaseUpdating && inst.Op.Target != nil {
		planID = inst.Op.Target.PlanID
	}
	if plan, err := e.catalog.Lookup(inst.Request.ServiceID, planID); err == nil && b.Upstream == "" && !plan.Settings().AllowsAccess(driver.Access(b.Access)) {
		return fmt.Errorf("%w: instance %s is changing to plan %q, which does not allow %s bindings", ErrUnprocessable, inst.ID, plan.Name, b.Access)
	}
	return nil
}

// withCredentials adds the stored credentials to a finished bind's answer.
func (e *Engine) withCredentials(ctx context.Context, rec *Record, res Result, err error) (BindResult, error) {
	if err != nil || res.Outcome == OutcomeAccepted {
		return BindResult{Result: res}, err
	}
	if rec.Phase != PhaseReady { // not the finished record yet: read it
		if rec, err = e.store.Get(ctx, KindBinding, rec.ID); err != nil {
			return BindResult{}, e.storeErr(ctx, err)
		}
	}
	return e.bindResult(rec, res)
}

// bindResult answers a finished bind from rec: the bucket's credentials,
// or the upstream's, as the upstream gave them.
func (e *Engine) bindResult(rec *Record, res Result) (BindResult, error) {
	if rec.Upstream != "" {
		raw, err := e.upstreamCredentials(rec)
		return BindResult{Result: res, RawCredentials: raw}, err
	}
	creds, err := e.credentials(rec)
	return BindResult{Result: res, Credentials: creds}, err
}

// checkUpstreamBind checks a bind of an upstream's service before it is
// recorded. A rotation (the predecessor is forwarded upstream) needs a
// plan the upstream's catalog says binding_rotatable.
func checkUpstreamBind(plan *catalog.Plan, r Request, id string) error {
	switch {
	case r.Predecessor != "" && !plan.Rotatable():
		return invalidf("plan %q does not allow binding rotation: the upstream broker's catalog does not say binding_rotatable for it", plan.Name)
	case r.Predecessor != "" && r.Predecessor == id:
		return invalidf("binding %s cannot rotate itself", id)
	}
	return checkFreeForm(r)
}

// upstreamCredentials opens an upstream binding's stored credentials: the
// JSON object the upstream answered, never logged.
func (e *Engine) upstreamCredentials(rec *Record) (json.RawMessage, error) {
	raw, err := e.box.Open(rec.SealedSecret, sealContext(rec))
	if err != nil || len(raw) == 0 {
		e.log.Error("Cannot open stored credentials; is --encryption-key-file the key they were sealed with?", "binding", rec.ID, "error", err)
		return nil, fmt.Errorf("%w: stored credentials of binding %s cannot be decrypted", ErrFailed, rec.ID)
	}
	return json.RawMessage(raw), nil
}

// credentials opens the binding's stored credentials.
func (e *Engine) credentials(rec *Record) (*Credentials, error) {
	secret, err := e.box.Open(rec.SealedSecret, sealContext(rec))
	if err != nil {
		e.log.Error("Cannot open stored credentials; is --encryption-key-file the key they were sealed with?", "binding", rec.ID, "error", err)
		return nil, fmt.Errorf("%w: stored credentials of binding %s cannot be decrypted", ErrFailed, rec.ID)
	}
	c := &Credentials{
		Bucket: rec.Bucket, Endpoint: e.endpoint.URL, Region: e.endpoint.Region, PathStyle: e.endpoint.PathStyle,
		AccessKeyID: rec.AccessKeyID, SecretAccessKey: string(secret), Access: rec.Access,
	}
	if u, err := url.Parse(e.endpoint.URL); err == nil && u.Host != "" {
		c.URI = (&url.URL{Scheme: "s3", User: url.UserPassword(c.AccessKeyID, c.SecretAccessKey), Host: u.Host, Path: "/" + rec.Bucket}).String()
	}
	return c, nil
}

// Unbind revokes a binding's credential, halting a bind in progress.
func (e *Engine) Unbind(ctx context.Context, req UnbindRequest) (Result, error) {
	for range maxCASRetries {
		rec, err := e.store.Get(ctx, KindBinding, req.BindingID)
		if errors.Is(err, ErrNotFound) || (err == nil && rec.InstanceID != req.InstanceID) {
			return Result{}, fmt.Errorf("%w: binding %s of instance %s", ErrGone, req.BindingID, req.InstanceID)
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		switch rec.Phase {
		case PhaseDeleted:
			return Result{}, fmt.Errorf("%w: binding %s", ErrGone, req.BindingID)
		case PhaseDeprovisioning:
			return e.inFlight(ctx, rec, req.AcceptsIncomplete)
		}
		rec.Phase = PhaseDeprovisioning
		rec.startOp(e.newOp(OpUnbind, req.AcceptsIncomplete, req.Identity))
		if err := e.save(ctx, rec); errors.Is(err, ErrStale) {
			continue
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		crashpoint.Hit(crashpoint.UnbindRecordWritten)
		e.log.Info("Unbinding", "id", rec.ID, "instance", rec.InstanceID, "operation", rec.Op.ID)
		e.supersede(KindBinding, rec.ID)
		return e.started(ctx, rec, OutcomeOK, e.answering(req.AcceptsIncomplete, nil))
	}
	return Result{}, fmt.Errorf("%w: binding %s keeps changing", ErrConcurrency, req.BindingID)
}

// GetBinding returns a finished binding with its credentials.
func (e *Engine) GetBinding(ctx context.Context, instanceID, bindingID string) (*BindingView, error) {
	rec, err := e.store.Get(ctx, KindBinding, bindingID)
	if errors.Is(err, ErrNotFound) || (err == nil && (rec.InstanceID != instanceID || rec.Phase != PhaseReady)) {
		return nil, fmt.Errorf("%w: binding %s of instance %s", ErrMissing, bindingID, instanceID)
	} else if err != nil {
		return nil, e.storeErr(ctx, err)
	}
	res, err := e.bindResult(rec, Result{})
	if err != nil {
		return nil, err
	}
	return &BindingView{Credentials: res.Credentials, RawCredentials: res.RawCredentials, Parameters: rec.Request.Parameters}, nil
}

// BindingLastOperation answers a poll for a binding operation.
func (e *Engine) BindingLastOperation(ctx context.Context, instanceID, bindingID, opID string) (LastOperation, error) {
	return e.lastOperation(ctx, KindBinding, bindingID, instanceID, opID)
}
