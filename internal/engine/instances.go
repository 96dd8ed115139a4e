package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
)

// Provision creates the instance's record and drives its provision, or
// answers a duplicate from the stored record (see the table "OSB answers"
// in docs/architecture.md).
func (e *Engine) Provision(ctx context.Context, req ProvisionRequest) (Result, error) {
	if req.InstanceID == "" {
		return Result{}, invalidf("instance id is empty")
	}
	plan, err := e.plan(req.ServiceID, req.PlanID)
	if err != nil {
		return Result{}, err
	}
	params, err := canonicalObject(req.Parameters)
	if err != nil {
		return Result{}, invalidf("parameters: %v", err)
	}
	if plan.Settings().AsyncRequired && !req.AcceptsIncomplete {
		return Result{}, fmt.Errorf("%w: plan %q provisions asynchronously only", ErrAsyncRequired, plan.Name)
	}
	if err := checkMaintenance(plan, req.MaintenanceVersion); err != nil {
		return Result{}, err
	}
	be, err := e.backendOf(req.ServiceID)
	if err != nil {
		return Result{}, err
	}
	how := e.answering(req.AcceptsIncomplete, plan)
	r := Request{ServiceID: req.ServiceID, PlanID: req.PlanID, Parameters: params,
		OrganizationGUID: req.OrganizationGUID, SpaceGUID: req.SpaceGUID, Context: req.Context,
		Maintenance: plan.Maintenance().Version}
	fp := fingerprint("", r)
	// An exact replay of a live instance, the hot path of a platform that
	// re-sends, is answered here from the record, as recordCreation would
	// answer it: the rest (its closures, and the request they keep) costs
	// allocations a replay has no use for (BenchmarkReplayPUT).
	first, err := e.store.Get(ctx, KindInstance, req.InstanceID)
	if err == nil && first.Fingerprint == fp {
		if res, ok := provisionReplay(first); ok {
			return res, nil
		}
	}
	return e.provisionFrom(ctx, provisioning{req: req, plan: plan, r: r, fp: fp, how: how, be: be}, stored{first, err})
}

// provisioning is a provision that passed Provision's checks.
type provisioning struct {
	req  ProvisionRequest
	plan *catalog.Plan
	// r is the request as a record keeps it (canonical parameters), fp
	// its fingerprint.
	r   Request
	fp  string
	how answering
	// be is the backend serving the service.
	be Backend
}

// provisionFrom is Provision past its checks, from first, what the store
// answered to its read.
func (e *Engine) provisionFrom(ctx context.Context, p provisioning, first stored) (Result, error) {
	req, plan, params, r, fp, how, be := p.req, p.plan, p.r.Parameters, p.r, p.fp, p.how, p.be
	rec, created, err := e.recordCreation(ctx, creation{
		kind: KindInstance, id: req.InstanceID, op: OpProvision, first: &first,
		same: func(rec *Record) bool { return rec.Fingerprint == fp },
		check: func() error {
			if err := plan.Validate(catalog.ForCreate, params); err != nil {
				return invalidf("%v", err)
			}
			if err := checkFreeForm(r); err != nil {
				return err
			}
			return be.Check(KindInstance, plan, r, req.InstanceID)
		},
		fresh: func() (*Record, error) {
			fresh := e.newInstance(req.InstanceID, be.Name(), r, fp, e.newOp(OpProvision, req.AcceptsIncomplete, req.Identity))
			fresh.Op.Sent = sentOf(req)
			return fresh, be.Prepare(ctx, fresh, Preparation{Look: e.lookTimeout(how)})
		},
		again: func(rec *Record) error {
			if rec.Phase == PhaseDeleted {
				rec.reuse(be.Name())
			}
			rec.Request, rec.Fingerprint, rec.Phase = r, fp, PhaseProvisioning
			rec.startOp(e.newOp(OpProvision, req.AcceptsIncomplete, req.Identity))
			rec.Op.Sent = sentOf(req)
			return be.Prepare(ctx, rec, Preparation{Look: e.lookTimeout(how)})
		},
	})
	if err != nil {
		return Result{}, err
	}
	if created {
		crashpoint.Hit(crashpoint.ProvisionRecordWritten)
		e.log.Info("Provisioning instance", append([]any{"id", req.InstanceID, "plan", plan.Name}, append(rec.resourceAttrs(), "operation", rec.Op.ID)...)...)
		return e.started(ctx, rec, OutcomeCreated, how)
	}
	if res, ok := provisionReplay(rec); ok {
		return res, nil
	}
	if rec.Phase == PhaseProvisioning {
		return e.inFlight(ctx, rec, req.AcceptsIncomplete)
	}
	// Deprovisioning, or failed by a later operation.
	return Result{}, fmt.Errorf("%w: instance %s is being deprovisioned, or its deprovision failed", ErrConcurrency, req.InstanceID)
}

// provisionReplay answers a provision identical to the one that made rec
// when rec's instance is live and no operation of it is in progress that a
// duplicate must wait for: 200, with its dashboard.
func provisionReplay(rec *Record) (Result, bool) {
	if rec.Phase != PhaseReady && rec.Phase != PhaseUpdating {
		return Result{}, false
	}
	return Result{Outcome: OutcomeOK, DashboardURL: rec.DashboardURL}, true
}

// sentOf is what a backend that forwards requests gets of a provision
// beside the record: the request's maintenance_info only when it had one;
// parameters and context are the record's (as sent). Made only for a write
// (a replay needs none).
func sentOf(req ProvisionRequest) *Sent {
	return &Sent{Maintenance: req.MaintenanceVersion}
}

// checkMaintenance refuses a maintenance_info.version that is not the
// plan's (the platform's catalog is stale, or it asks for a version the
// broker does not offer). None sent is always fine.
func checkMaintenance(plan *catalog.Plan, version string) error {
	if version == "" {
		return nil
	}
	if want := plan.Maintenance().Version; version != want {
		if want == "" {
			return fmt.Errorf("%w: plan %q has no maintenance_info, the request names version %q", ErrMaintenanceInfoConflict, plan.Name, version)
		}
		return fmt.Errorf("%w: plan %q is at maintenance_info.version %q, the request names %q", ErrMaintenanceInfoConflict, plan.Name, want, version)
	}
	return nil
}

// lookTimeout bounds a look at the backend made before the intent is
// recorded (Preparation.Look). An asynchronous request leaves the look to
// the worker at once, so that its 202 never waits for the backend, and one
// answered within the sync budget looks no longer than the budget.
func (e *Engine) lookTimeout(how answering) time.Duration {
	if how == answerAsync {
		return 0
	}
	if how == answerBudget {
		return min(5*time.Second, e.syncBudget)
	}
	return 5 * time.Second
}

func (e *Engine) newInstance(id, backend string, r Request, fp string, op Operation) *Record {
	now := time.Now().UTC()
	return &Record{
		Kind: KindInstance, ID: id, Fingerprint: fp, Request: r,
		Phase: PhaseProvisioning, Op: op, Backend: backend,
		Lease: e.replica, LeaseUntil: now.Add(e.leaseTTL), // this engine drives what it records
		CreatedAt: now, UpdatedAt: now,
	}
}

// answering is how a request that started an operation is answered.
type answering int

const (
	// answerSync waits for the operation's end (accepts_incomplete absent).
	answerSync answering = iota
	// answerAsync answers 202 at once.
	answerAsync
	// answerBudget waits up to the sync budget: an operation finished by
	// then is answered as a synchronous one, else 202. The operation is
	// recorded as an asynchronous one either way, so that one a crash cuts
	// short resumes exactly as an asynchronous operation does.
	answerBudget
)

// answering returns how a request is answered: synchronously without
// accepts_incomplete, else within the sync budget, unless the plan (nil
// for bindings, which never require asynchrony) requires asynchronous
// operations or there is no budget.
func (e *Engine) answering(async bool, plan *catalog.Plan) answering {
	switch {
	case !async:
		return answerSync
	case e.syncBudget > 0 && (plan == nil || !plan.Settings().AsyncRequired):
		return answerBudget
	default:
		return answerAsync
	}
}

// started ensures the worker for an operation this request began, and
// answers as how says.
func (e *Engine) started(ctx context.Context, rec *Record, done Outcome, how answering) (Result, error) {
	res, _, err := e.startedRecord(ctx, rec, done, how)
	return res, err
}

// startedRecord is started that also returns the record as the operation
// left it (nil when answered 202).
func (e *Engine) startedRecord(ctx context.Context, rec *Record, done Outcome, how answering) (Result, *Record, error) {
	if how == answerAsync {
		e.ensureWorkerWith(rec)
		return Result{Outcome: OutcomeAccepted, Operation: rec.Op.ID}, nil, nil
	}
	wt := e.watch(rec.Kind, rec.ID) // before the worker can write
	e.ensureWorkerWith(rec)
	if how == answerBudget {
		return e.awaitBudget(ctx, rec, done, wt)
	}
	return e.awaitOutcome(ctx, rec, done, wt)
}

// awaitBudget waits up to the sync budget for rec's operation. Finished by
// then, it is answered as awaitOutcome answers; still running, superseded,
// or not known to have ended (the store did not answer), 202 with the
// operation, which carries on as any asynchronous one.
func (e *Engine) awaitBudget(ctx context.Context, rec *Record, done Outcome, wt *watch) (Result, *Record, error) {
	// The budget counts from the operation's start: a look at the backend
	// before the record was written spent part of it.
	bctx, cancel := context.WithDeadline(ctx, rec.Op.StartedAt.Add(e.syncBudget))
	defer cancel()
	opID := rec.Op.ID
	end, err := e.wait(bctx, wt, rec.Kind, rec.ID, opID, rec.Version)
	if err != nil || end.Op.ID != opID || !end.Op.Finished() {
		e.metrics.budget.WithLabelValues(string(rec.Op.Type), "accepted").Inc()
		return Result{Outcome: OutcomeAccepted, Operation: opID}, nil, nil
	}
	e.metrics.budget.WithLabelValues(string(rec.Op.Type), "finished").Inc()
	return e.outcome(end, opID, done)
}

// inFlight answers a duplicate of an operation in progress: the same
// operation when async, else the outcome once it has finished.
func (e *Engine) inFlight(ctx context.Context, rec *Record, async bool) (Result, error) {
	if async {
		return Result{Outcome: OutcomeAccepted, Operation: rec.Op.ID}, nil
	}
	e.ensureWorker(rec.Kind, rec.ID) // after a restart there may be no worker yet
	res, _, err := e.awaitOutcome(ctx, rec, OutcomeOK, nil)
	return res, err
}

// awaitOutcome waits until rec's operation ends and returns the answer
// and the record as the operation left it. wt, if not nil, was taken after
// the caller wrote rec and before the worker was started (see wait).
func (e *Engine) awaitOutcome(ctx context.Context, rec *Record, done Outcome, wt *watch) (Result, *Record, error) {
	ctx, cancel := context.WithTimeout(ctx, e.syncTTL+5*time.Second)
	defer cancel()
	opID := rec.Op.ID
	end, err := e.wait(ctx, wt, rec.Kind, rec.ID, opID, rec.Version)
	if err != nil {
		return Result{}, nil, err
	}
	return e.outcome(end, opID, done)
}

// outcome answers operation opID from end, the record once it ended or was
// superseded.
func (e *Engine) outcome(end *Record, opID string, done Outcome) (Result, *Record, error) {
	if end.Op.ID != opID {
		return Result{}, nil, fmt.Errorf("%w: %s %s was superseded by %s", ErrConcurrency, end.Kind, end.ID, end.Op.Type)
	}
	if end.Op.State == OpFailed && end.Op.Refused {
		return Result{}, nil, fmt.Errorf("%w: %s", ErrUnprocessable, end.Op.Description)
	}
	if end.Op.State == OpFailed {
		return Result{}, nil, fmt.Errorf("%w: %s", ErrFailed, end.Op.Description)
	}
	return Result{Outcome: done, DashboardURL: end.DashboardURL}, end, nil
}

// Update changes an instance's plan or parameters.
func (e *Engine) Update(ctx context.Context, req UpdateRequest) (Result, error) {
	params, err := canonicalObject(req.Parameters)
	if err != nil {
		return Result{}, invalidf("parameters: %v", err)
	}
	for range maxCASRetries {
		rec, err := e.store.Get(ctx, KindInstance, req.InstanceID)
		if errors.Is(err, ErrNotFound) {
			return Result{}, fmt.Errorf("%w: instance %s does not exist", ErrMissing, req.InstanceID)
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		target, plan, err := e.updateTarget(ctx, rec, req, params)
		if err != nil {
			return Result{}, err
		}
		if rec.Phase != PhaseReady {
			return e.updateNotReady(ctx, rec, req, target)
		}
		if sameTarget(&rec.Request, target) {
			return Result{Outcome: OutcomeOK}, nil // nothing to change
		}
		if plan.Settings().AsyncRequired && !req.AcceptsIncomplete {
			return Result{}, fmt.Errorf("%w: plan %q updates asynchronously only", ErrAsyncRequired, plan.Name)
		}
		rec.Phase = PhaseUpdating
		rec.startOp(e.newOp(OpUpdate, req.AcceptsIncomplete, req.Identity))
		rec.Op.Target = &target
		// A backend that forwards requests sends what the platform sent,
		// not the merge.
		rec.Op.Sent = &Sent{Parameters: params, Context: req.Context, Maintenance: req.MaintenanceVersion}
		if err := e.save(ctx, rec); errors.Is(err, ErrStale) {
			continue
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		if target.PlanID != rec.Request.PlanID {
			if err := e.recheckBindings(ctx, rec, plan); err != nil {
				return Result{}, err
			}
		}
		e.log.Info("Updating instance", "id", rec.ID, "plan", plan.Name, "operation", rec.Op.ID)
		return e.started(ctx, rec, OutcomeOK, e.answering(req.AcceptsIncomplete, plan))
	}
	return Result{}, fmt.Errorf("%w: instance %s keeps changing", ErrConcurrency, req.InstanceID)
}

// updateNotReady answers an update of an instance that is not ready: a
// replay of the update in progress waits for it; anything else is refused
// as the instance's phase says.
func (e *Engine) updateNotReady(ctx context.Context, rec *Record, req UpdateRequest, target Request) (Result, error) {
	switch rec.Phase {
	case PhaseUpdating:
		if t := rec.Op.Target; t != nil && sameTarget(t, target) {
			return e.inFlight(ctx, rec, req.AcceptsIncomplete)
		}
		return Result{}, fmt.Errorf("%w: instance %s is being updated", ErrConcurrency, req.InstanceID)
	case PhaseProvisioning, PhaseDeprovisioning:
		return Result{}, fmt.Errorf("%w: instance %s is being %s", ErrConcurrency, req.InstanceID, rec.Op.Type+"ed")
	case PhaseDeleted:
		return Result{}, fmt.Errorf("%w: instance %s does not exist", ErrMissing, req.InstanceID)
	default:
		return Result{}, fmt.Errorf("%w: instance %s failed; deprovision it", ErrUnprocessable, req.InstanceID)
	}
}

// sameTarget reports whether an update to target asks for what r already
// is (plan, parameters and maintenance version).
func sameTarget(r *Request, target Request) bool {
	return r.PlanID == target.PlanID && bytes.Equal(r.Parameters, target.Parameters) && r.Maintenance == target.Maintenance
}

// recheckBindings ends a plan change that the instance's bindings forbid.
// A bind recorded after updateTarget's check and before the update's write
// looks at the instance after it, and may not have seen the change: the
// bindings are looked at again now that it is recorded.
func (e *Engine) recheckBindings(ctx context.Context, rec *Record, plan *catalog.Plan) error {
	err := e.bindingsForbid(ctx, rec.ID, plan)
	if err == nil {
		return nil
	}
	rec.Phase = PhaseReady
	rec.Op.State, rec.Op.Description, rec.Op.EndedAt = OpFailed, "update refused: "+err.Error(), time.Now().UTC()
	if serr := e.save(ctx, rec); serr != nil && !errors.Is(serr, ErrStale) {
		return e.storeErr(ctx, serr)
	}
	return err
}

// updateTarget checks an update against the catalog and the instance's
// bindings, and returns the request the instance will have after it.
func (e *Engine) updateTarget(ctx context.Context, rec *Record, req UpdateRequest, params []byte) (Request, *catalog.Plan, error) {
	if req.ServiceID != rec.Request.ServiceID {
		return Request{}, nil, invalidf("service_id %q is not the instance's service", req.ServiceID)
	}
	planID := req.PlanID
	if planID == "" {
		planID = rec.Request.PlanID
	}
	plan, err := e.plan(req.ServiceID, planID)
	if err != nil {
		return Request{}, nil, err
	}
	if err := checkMaintenance(plan, req.MaintenanceVersion); err != nil {
		return Request{}, nil, err
	}
	if planID != rec.Request.PlanID {
		old, err := e.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID)
		if err == nil && !old.Updateable() || !plan.Updateable() {
			return Request{}, nil, fmt.Errorf("%w: plan %q cannot be changed to %q", ErrUnprocessable, rec.Request.PlanID, plan.Name)
		}
		// S3 can only suspend versioning, and the versions kept stay: a
		// plan without it would promise what the bucket no longer is.
		if err == nil && old.Settings().Versioning && !plan.Settings().Versioning {
			return Request{}, nil, fmt.Errorf("%w: plan %q keeps object versions and plan %q does not: versioning cannot be turned off",
				ErrUnprocessable, old.Name, plan.Name)
		}
		if err := e.bindingsForbid(ctx, rec.ID, plan); err != nil {
			return Request{}, nil, err
		}
	}
	if err := plan.Validate(catalog.ForUpdate, params); err != nil {
		return Request{}, nil, invalidf("%v", err)
	}
	merged, err := mergeParams(rec.Request.Parameters, params)
	if err != nil {
		return Request{}, nil, invalidf("parameters: %v", err)
	}
	t := rec.Request
	t.PlanID, t.Parameters = planID, merged
	if planID != rec.Request.PlanID || req.MaintenanceVersion != "" {
		// A plan change applies the new plan's settings, and so does an
		// upgrade to the plan's current maintenance_info.version: the
		// instance is at that version once the update succeeded.
		t.Maintenance = plan.Maintenance().Version
	}
	if len(req.Context) > 0 {
		t.Context = req.Context
	}
	// The merge can grow the parameters past what one request may send.
	if err := checkFreeForm(t); err != nil {
		return Request{}, nil, err
	}
	be, err := e.backend(rec)
	if err != nil {
		return Request{}, nil, fmt.Errorf("%w: %w", ErrUnprocessable, err)
	}
	if err := be.Check(KindInstance, plan, t, rec.ID); err != nil {
		return Request{}, nil, err
	}
	return t, plan, nil
}

// bindingsForbid reports a live binding of the instance whose access plan
// does not allow.
func (e *Engine) bindingsForbid(ctx context.Context, instanceID string, plan *catalog.Plan) error {
	bindings, err := e.store.List(ctx, ListOptions{Kind: KindBinding, InstanceID: instanceID})
	if err != nil {
		return e.storeErr(ctx, err)
	}
	for _, b := range bindings {
		if b.Phase == PhaseDeleted {
			continue
		}
		be, err := e.backend(b)
		if err != nil {
			continue // its operations fail anyway; nothing it has is checked
		}
		if what, ok := be.Allows(plan, b); !ok {
			return fmt.Errorf("%w: binding %s has %s access, which plan %q does not allow; unbind it first",
				ErrUnprocessable, b.ID, what, plan.Name)
		}
	}
	// List skipped the bindings it cannot read: their access is unknown.
	if ids := e.unreadableBindings(instanceID); len(ids) > 0 {
		return fmt.Errorf("%w: bindings %s cannot be read, so whether plan %q allows them is unknown; repair them with `bucketbroker admin records repair` first",
			ErrUnprocessable, strings.Join(ids, ", "), plan.Name)
	}
	return nil
}

// Deprovision deletes an instance: it halts a provision in progress,
// revokes the instance's bindings and deletes the bucket.
func (e *Engine) Deprovision(ctx context.Context, req DeprovisionRequest) (Result, error) {
	for range maxCASRetries {
		rec, err := e.store.Get(ctx, KindInstance, req.InstanceID)
		if errors.Is(err, ErrNotFound) {
			return Result{}, fmt.Errorf("%w: instance %s", ErrGone, req.InstanceID)
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		plan, err := e.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID)
		if err != nil {
			plan = nil // a plan no longer in the catalog requires nothing
		}
		if plan != nil && plan.Settings().AsyncRequired && !req.AcceptsIncomplete && rec.Phase != PhaseDeleted {
			return Result{}, fmt.Errorf("%w: plan %q deprovisions asynchronously only", ErrAsyncRequired, plan.Name)
		}
		switch rec.Phase {
		case PhaseDeleted:
			return Result{}, fmt.Errorf("%w: instance %s", ErrGone, req.InstanceID)
		case PhaseDeprovisioning:
			return e.inFlight(ctx, rec, req.AcceptsIncomplete)
		case PhaseUpdating:
			return Result{}, fmt.Errorf("%w: instance %s is being updated", ErrConcurrency, req.InstanceID)
		}
		halting := rec.Phase == PhaseProvisioning
		rec.Phase = PhaseDeprovisioning
		rec.startOp(e.newOp(OpDeprovision, req.AcceptsIncomplete, req.Identity))
		if err := e.save(ctx, rec); errors.Is(err, ErrStale) {
			continue
		} else if err != nil {
			return Result{}, e.storeErr(ctx, err)
		}
		crashpoint.Hit(crashpoint.DeprovisionRecordWritten)
		e.log.Info("Deprovisioning instance", "id", rec.ID, "halting_provision", halting, "operation", rec.Op.ID)
		e.supersede(KindInstance, rec.ID)
		return e.started(ctx, rec, OutcomeOK, e.answering(req.AcceptsIncomplete, plan))
	}
	return Result{}, fmt.Errorf("%w: instance %s keeps changing", ErrConcurrency, req.InstanceID)
}

// GetInstance returns a provisioned instance.
func (e *Engine) GetInstance(ctx context.Context, id string) (*InstanceView, error) {
	rec, err := e.store.Get(ctx, KindInstance, id)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: instance %s", ErrMissing, id)
	} else if err != nil {
		return nil, e.storeErr(ctx, err)
	}
	switch rec.Phase {
	case PhaseReady, PhaseDeprovisioning:
	case PhaseUpdating:
		return nil, fmt.Errorf("%w: instance %s is being updated", ErrConcurrency, id)
	default:
		return nil, fmt.Errorf("%w: instance %s is %s", ErrMissing, id, rec.Phase)
	}
	v := &InstanceView{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID,
		Parameters: rec.Request.Parameters, Bucket: rec.ResourceName(), MaintenanceVersion: rec.Request.Maintenance,
		DashboardURL: rec.DashboardURL}
	if plan, err := e.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID); err == nil && plan.Maintenance().Version == v.MaintenanceVersion {
		v.MaintenanceDescription = plan.Maintenance().Description
	}
	return v, nil
}

// InstanceLastOperation answers a poll for an instance operation.
func (e *Engine) InstanceLastOperation(ctx context.Context, id, opID string) (LastOperation, error) {
	return e.lastOperation(ctx, KindInstance, id, "", opID)
}

func (e *Engine) lastOperation(ctx context.Context, kind Kind, id, instanceID, opID string) (LastOperation, error) {
	rec, err := e.store.Get(ctx, kind, id)
	if errors.Is(err, ErrNotFound) || (err == nil && instanceID != "" && rec.InstanceID != instanceID) {
		return LastOperation{}, fmt.Errorf("%w: %s %s", ErrMissing, kind, id)
	} else if err != nil {
		return LastOperation{}, e.storeErr(ctx, err)
	}
	op, ok := rec.findOp(opID)
	if !ok {
		if rec.Phase == PhaseDeleted {
			return LastOperation{Gone: true}, nil
		}
		// The resource exists: 404 would tell the platform it does not.
		return LastOperation{}, invalidf("%s %s has no operation %q", kind, id, opID)
	}
	if !op.Finished() && time.Now().After(op.Deadline.Add(time.Minute)) {
		// Its worker should have failed it at the deadline; make sure a
		// worker is on it (after a restart, or on another replica's death).
		e.ensureWorker(kind, id)
	}
	return LastOperation{State: op.State, Description: op.Description}, nil
}

// plan looks up a plan, mapping an unknown id to ErrInvalid.
func (e *Engine) plan(serviceID, planID string) (*catalog.Plan, error) {
	if serviceID == "" || planID == "" {
		return nil, invalidf("service_id and plan_id are required")
	}
	p, err := e.catalog.Lookup(serviceID, planID)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return p, nil
}
