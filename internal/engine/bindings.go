package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
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
// request and its fingerprint, the plan and the backend serving it. Its
// methods are the parts of recordCreation's loop (see creation).
type bindCall struct {
	e    *Engine
	req  BindRequest
	plan *catalog.Plan
	r    Request
	fp   string
	how  answering
	be   Backend
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
	be, err := e.backendOf(req.ServiceID)
	if err != nil {
		return nil, err
	}
	r := Request{ServiceID: req.ServiceID, PlanID: req.PlanID, Parameters: params,
		AppGUID: req.AppGUID, BindResource: bindResource, Context: req.Context, Predecessor: req.PredecessorBindingID}
	return &bindCall{e: e, req: req, plan: plan, r: r, fp: fingerprint(req.InstanceID, r),
		how: e.answering(req.AcceptsIncomplete, nil), be: be}, nil
}

// check runs before anything is written or answered, except for an exact
// replay of a live binding (see creation.check).
func (b *bindCall) check() error {
	if err := b.plan.Validate(catalog.ForBind, b.r.Parameters); err != nil {
		return invalidf("%v", err)
	}
	if err := b.be.Check(KindBinding, b.plan, b.r, b.req.BindingID); err != nil {
		return err
	}
	return checkFreeForm(b.r)
}

// predecessor returns the binding a rotation rotates (nil: none), looked
// up only when the binding is recorded anew (a replay is answered from its
// record, whatever became of the predecessor since).
func (b *bindCall) predecessor(ctx context.Context) (*Record, error) {
	pred := b.r.Predecessor
	if pred == "" {
		return nil, nil
	}
	p, err := b.e.store.Get(ctx, KindBinding, pred)
	if errors.Is(err, ErrNotFound) || (err == nil && (p.InstanceID != b.req.InstanceID || p.Phase != PhaseReady)) {
		return nil, invalidf("predecessor binding %s of instance %s does not exist, or is being made or deleted", pred, b.req.InstanceID)
	} else if err != nil {
		return nil, b.e.storeErr(ctx, err)
	}
	return p, nil
}

// preparation is what the backend's Prepare gets for this bind.
func (b *bindCall) preparation(ctx context.Context) (Preparation, error) {
	inst, err := b.e.bindableInstance(ctx, b.req)
	if err != nil {
		return Preparation{}, err
	}
	pred, err := b.predecessor(ctx)
	if err != nil {
		return Preparation{}, err
	}
	return Preparation{Look: b.e.lookTimeout(b.how), Instance: inst, Predecessor: pred}, nil
}

// fresh makes the record of a binding id never seen.
func (b *bindCall) fresh(ctx context.Context) (*Record, error) {
	p, err := b.preparation(ctx)
	if err != nil {
		return nil, err
	}
	rec := b.e.newBinding(b.req, b.be.Name(), b.r, b.fp)
	return rec, b.be.Prepare(ctx, rec, p)
}

// again makes a deleted or failed binding's record the new request's.
func (b *bindCall) again(ctx context.Context, rec *Record) error {
	p, err := b.preparation(ctx)
	if err != nil {
		return err
	}
	if rec.Phase == PhaseDeleted {
		rec.reuse(b.be.Name())
	}
	rec.InstanceID, rec.Request, rec.Fingerprint, rec.Phase = p.Instance.ID, b.r, b.fp, PhaseProvisioning
	rec.startOp(b.e.newOp(OpBind, b.req.AcceptsIncomplete, b.req.Identity))
	return b.be.Prepare(ctx, rec, p)
}

func (e *Engine) newBinding(req BindRequest, backend string, r Request, fp string) *Record {
	now := time.Now().UTC()
	return &Record{
		Kind: KindBinding, ID: req.BindingID, InstanceID: req.InstanceID, Fingerprint: fp, Request: r,
		Phase: PhaseProvisioning, Op: e.newOp(OpBind, req.AcceptsIncomplete, req.Identity), Backend: backend,
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
		// Nothing was attempted: the next bind of the id starts anew.
		rec.reuse(rec.Backend)
		rec.Phase = PhaseDeleted
		rec.Op.State, rec.Op.Description, rec.Op.EndedAt = OpFailed, "bind failed: "+refused.Error(), time.Now().UTC()
		if err := e.save(ctx, rec); err != nil && !errors.Is(err, ErrStale) {
			return BindResult{}, e.storeErr(ctx, err)
		}
		return BindResult{}, refused
	}
	crashpoint.Hit(crashpoint.BindRecordWritten)
	e.log.Info("Binding", append([]any{"id", rec.ID, "instance", rec.InstanceID}, append(rec.resourceAttrs(), "operation", rec.Op.ID)...)...)
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
	plan, err := e.catalog.Lookup(inst.Request.ServiceID, planID)
	if err != nil {
		return nil
	}
	be, err := e.backend(b)
	if err != nil {
		return nil
	}
	if what, ok := be.Allows(plan, b); !ok {
		return fmt.Errorf("%w: instance %s is changing to plan %q, which does not allow %s bindings", ErrUnprocessable, inst.ID, plan.Name, what)
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

// bindResult answers a finished bind from rec: the credentials its
// backend builds from the record and its secret.
func (e *Engine) bindResult(rec *Record, res Result) (BindResult, error) {
	be, err := e.backend(rec)
	if err != nil {
		return BindResult{}, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	secret, err := e.box.Open(rec.SealedSecret, sealContext(rec))
	var creds *Credentials
	var raw json.RawMessage
	if err == nil {
		creds, raw, err = be.Credentials(rec, secret)
	}
	if err != nil {
		e.log.Error("Cannot open stored credentials; is --encryption-key-file the key they were sealed with?", "binding", rec.ID, "error", err)
		return BindResult{}, fmt.Errorf("%w: stored credentials of binding %s cannot be decrypted", ErrFailed, rec.ID)
	}
	return BindResult{Result: res, Credentials: creds, RawCredentials: raw}, nil
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
		rec.startDeletion()
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
