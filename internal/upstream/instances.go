package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// pollEnd is how an upstream operation a poll waited for ended.
type pollEnd int

const (
	endSucceeded pollEnd = iota + 1
	endFailed
	// endGone: the upstream no longer knows the resource (410, or 404).
	endGone
)

// created is what a create step found out.
type created struct {
	// async: the upstream answered 202; op is its operation string.
	async bool
	op    string
	// adopted: the resource exists already (a duplicate answer, then a
	// look), in the upstream's last_operation state.
	adopted bool
	state   string
	// dashboard is an instance's dashboard_url.
	dashboard string
}

// attempt is what a provision's create step knows across its tries.
type attempt struct {
	// sent: a create of the id may have reached the upstream (this
	// operation's or, with Record.Upstream.Attempted, an earlier one's).
	sent bool
	// seen: a look found the instance without telling whether it is live
	// (last_operation's "failed" where GET cannot decide): it may hold
	// data, so giving up deletes nothing.
	seen bool
}

// Provision creates the instance upstream under the record's id (see the
// package doc for the duplicate answers), then polls an asynchronous
// creation to its end.
func (u *Upstream) Provision(ctx context.Context, w *engine.Work) error {
	if w.Rec.Upstream == nil {
		return w.Finish(ctx, errNoState)
	}
	rec := w.Rec
	if rec.Upstream.Op.OpID == rec.Op.ID {
		return u.provisionPolled(ctx, w)
	}
	if rec.Op.Sent == nil {
		return w.Finish(ctx, errors.New("provision without the platform's request (the record's operation has no sent part)"))
	}
	a := attempt{sent: rec.Upstream.Attempted}
	if !a.sent {
		rec.Upstream.Attempted = true
		if err := w.Save(ctx); err != nil {
			return err
		}
	}
	c, err := u.createInstance(ctx, w, &a)
	if err != nil {
		return u.createGaveUp(ctx, w, err, a)
	}
	crashpoint.Hit(crashpoint.ProvisionUpstreamAnswered)
	if c.dashboard != "" {
		rec.DashboardURL = c.dashboard
	}
	if c.async || c.state == osbclient.StateInProgress {
		rec.Upstream.Op = engine.UpstreamOp{OpID: rec.Op.ID, Operation: c.op}
		if err := w.Save(ctx); err != nil {
			return err
		}
		if c.adopted {
			w.Logger().Info("Adopted an upstream instance being created", "upstream", u.cfg.Name, "id", rec.ID)
		}
		return u.provisionPolled(ctx, w)
	}
	if c.adopted {
		w.Logger().Info("Adopted the upstream instance of an earlier attempt", "upstream", u.cfg.Name, "id", rec.ID)
	}
	return w.Finish(ctx, nil)
}

// provisionPolled polls the upstream's creation to its end. A creation
// the upstream no longer knows (deleted meanwhile) is made again.
func (u *Upstream) provisionPolled(ctx context.Context, w *engine.Work) error {
	rec := w.Rec
	own := rec.Upstream.Op.Operation != "" // polled by the operation its 202 named
	end, desc, err := u.pollInstance(ctx, w)
	if err != nil {
		return w.Fail(ctx, err)
	}
	rec.Upstream.Op = engine.UpstreamOp{}
	switch end {
	case endSucceeded:
		u.fetchDashboard(ctx, w) // an adopted creation's 202 was not ours to read
		return w.Finish(ctx, nil)
	case endGone:
		if err := w.Save(ctx); err != nil {
			return err
		}
		return u.Provision(ctx, w)
	}
	failed := fmt.Errorf("the upstream's creation failed: %s", desc)
	if !own {
		// A poll without an operation may be answered about one the
		// upstream lost track of: where GET finds the instance, it is
		// live; elsewhere it stays until the platform acts (a deprovision
		// deletes it).
		if live, err := u.live(ctx, rec); err == nil && live {
			w.Logger().Info("The upstream's last_operation says failed but GET finds the instance; adopted it",
				"upstream", u.cfg.Name, "id", rec.ID, "upstream_description", desc)
			u.fetchDashboard(ctx, w)
			return w.Finish(ctx, nil)
		}
		return w.Finish(ctx, failed)
	}
	// The upstream said of its own operation that the creation failed:
	// the instance was never handed to anyone, so it is deleted now, and
	// a provision sent again meets nothing and creates it anew.
	if err := u.deleteInstance(ctx, w); err != nil {
		if w.Interrupted(ctx, err) {
			return err
		}
		return w.Fail(ctx, fmt.Errorf("%w; deleting it upstream failed too (a deprovision deletes it): %w", failed, err))
	}
	w.Logger().Info("Deleted an upstream instance whose creation failed", "upstream", u.cfg.Name, "id", rec.ID)
	return w.Finish(ctx, failed)
}

// live reports whether the upstream's GET finds the instance; false
// without asking where the service is not instances_retrievable.
func (u *Upstream) live(ctx context.Context, rec *engine.Record) (bool, error) {
	if !u.service(rec.Request.ServiceID).InstancesRetrievable {
		return false, nil
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := u.client.GetInstance(gctx, rec.ID, osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
	if notFound(err) {
		return false, nil
	}
	return err == nil, err
}

// createInstance sends the provision until it gets a definite answer;
// after an answer that may hide an existing instance it looks. Nothing it
// finds is deleted: an identical PUT is sent again, or the operation fails
// for an operator.
func (u *Upstream) createInstance(ctx context.Context, w *engine.Work, a *attempt) (created, error) {
	rec := w.Rec
	req := osbclient.ProvisionRequest{
		Call:      osbclient.Call{AcceptsIncomplete: true, Identity: w.Identity()},
		ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID,
		OrganizationGUID: rec.Request.OrganizationGUID, SpaceGUID: rec.Request.SpaceGUID,
		Context: rec.Request.Context, Parameters: rec.Request.Parameters,
		MaintenanceInfo: maintenanceInfo(rec.Op.Sent.Maintenance),
	}
	var c created
	err := u.step(ctx, w, "provision upstream", func(ctx context.Context) error {
		resp, err := u.client.Provision(ctx, rec.ID, req)
		prior := a.sent
		a.sent = true
		if err == nil {
			c = created{async: resp.Async(), op: resp.Operation, dashboard: resp.DashboardURL}
			return nil
		}
		if osbclient.IsStatus(err, http.StatusConflict) && !prior {
			return fmt.Errorf("the upstream has an instance %s that bucketbroker did not create: %w: %w", rec.ID, engine.ErrNotOurs, err)
		}
		if refused(err) {
			return classify(err)
		}
		look, lerr := u.lookInstance(ctx, rec)
		switch {
		case lerr != nil:
			return fmt.Errorf("%w (and a look at the instance failed: %w)", err, lerr)
		case !look.found:
			return err // not there: send it again
		case look.state == osbclient.StateSucceeded, look.state == osbclient.StateInProgress:
			c = created{adopted: true, state: look.state, dashboard: look.dashboard}
			return nil
		}
		// last_operation says failed (or something the spec does not
		// name) and GET cannot decide: the instance may be live.
		a.seen = true
		if osbclient.Answered(err) && !server(err) {
			// The upstream says it has the instance (409,
			// ConcurrencyError) and will not take the identical PUT.
			return refusal{fmt.Errorf("the upstream answers the provision of %s with %w, and its last_operation says %q (%s); "+
				"without instances_retrievable bucketbroker cannot tell whether the instance is live and deletes nothing: "+
				"check it upstream, then deprovision or provision again", rec.ID, err, look.state, look.description)}
		}
		return fmt.Errorf("%w; its last_operation says %q (%s): sending the identical provision again", err, look.state, look.description)
	})
	return c, err
}

// server reports whether err is the upstream's 5xx.
func server(err error) bool {
	var e *osbclient.Error
	return errors.As(err, &e) && e.Status >= 500
}

// createGaveUp ends a provision whose create step failed. One that ran out
// of time without a definite answer, and whose looks never found the
// instance, may have made it: it is deleted upstream (orphan mitigation,
// as the spec asks of a platform). What a look found is never deleted.
func (u *Upstream) createGaveUp(ctx context.Context, w *engine.Work, err error, a attempt) error {
	if errors.Is(err, engine.ErrNotOurs) {
		// Nothing upstream is ours: a deprovision must not delete it.
		w.Rec.Upstream.Attempted = false
		return w.Fail(ctx, err)
	}
	if w.Interrupted(ctx, err) || errors.Is(err, engine.ErrRefused) || a.seen {
		return w.Fail(ctx, err)
	}
	rec := w.Rec
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, derr := u.client.Deprovision(mctx, rec.ID, osbclient.DeleteRequest{
		Call: osbclient.Call{AcceptsIncomplete: true}, ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
	if derr != nil && !notFound(derr) {
		w.Logger().Warn("Orphan mitigation: cannot delete what may exist upstream; a deprovision deletes it",
			"upstream", u.cfg.Name, "id", rec.ID, "error", derr)
	} else {
		w.Logger().Info("Orphan mitigation: deleted what may exist upstream of a provision that gave up",
			"upstream", u.cfg.Name, "id", rec.ID)
	}
	return w.Fail(ctx, err)
}

// look is what a look at an instance found.
type look struct {
	found bool
	// state is the upstream's last_operation state, or succeeded where
	// GET found the instance.
	state, description string
	dashboard          string
}

// lookInstance asks the upstream whether the instance exists, after an
// answer to a create that may hide it. Its last_operation without an
// operation (the latest) is a hint: "in progress" is adopted and polled;
// anything else may be about another operation (a deprovision's
// "succeeded") or about one the upstream lost track of ("failed", "The
// operation could not be found." of a live instance). Where the service
// is instances_retrievable, GET decides and its dashboard_url is
// returned; elsewhere the state is returned for the caller to weigh. found
// is false when the upstream does not know the id.
func (u *Upstream) lookInstance(ctx context.Context, rec *engine.Record) (look, error) {
	poll := osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID}
	retrievable := u.service(rec.Request.ServiceID).InstancesRetrievable
	lo, err := u.client.InstanceLastOperation(ctx, rec.ID, poll)
	switch {
	case err == nil && (lo.State == osbclient.StateInProgress || !retrievable):
		return look{found: true, state: lo.State, description: lo.Description}, nil
	case err != nil && (!osbclient.Answered(err) || (!refused(err) && !notFound(err))):
		return look{}, err
	case err != nil && !retrievable:
		if notFound(err) {
			return look{}, nil
		}
		return look{}, err
	}
	in, err := u.client.GetInstance(ctx, rec.ID, poll)
	if err != nil {
		if notFound(err) {
			return look{}, nil
		}
		return look{}, err
	}
	return look{found: true, state: osbclient.StateSucceeded, dashboard: in.DashboardURL}, nil
}

// fetchDashboard takes an adopted instance's dashboard_url from the
// upstream's GET, where its service is instances_retrievable: the create's
// answer that carried it was lost. One try; without it the instance has
// none, as the docs say.
func (u *Upstream) fetchDashboard(ctx context.Context, w *engine.Work) {
	rec := w.Rec
	if rec.DashboardURL != "" || !u.service(rec.Request.ServiceID).InstancesRetrievable {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	in, err := u.client.GetInstance(gctx, rec.ID, osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
	if err != nil {
		w.Logger().Warn("Cannot fetch an adopted upstream instance's dashboard_url; it has none",
			"upstream", u.cfg.Name, "id", rec.ID, "error", err)
		return
	}
	rec.DashboardURL = in.DashboardURL
}

// pollInstance polls the upstream operation the record holds until it
// ends, relaying the upstream's description meanwhile.
func (u *Upstream) pollInstance(ctx context.Context, w *engine.Work) (pollEnd, string, error) {
	return u.poll(ctx, w, func(ctx context.Context, req osbclient.PollRequest) (*osbclient.LastOperation, error) {
		return u.client.InstanceLastOperation(ctx, w.Rec.ID, req)
	})
}

// poll polls the upstream operation the record holds, through lastOp (an
// instance's or a binding's last_operation), until it ends; meanwhile the
// record's operation relays the upstream's description.
func (u *Upstream) poll(ctx context.Context, w *engine.Work, lastOp func(context.Context, osbclient.PollRequest) (*osbclient.LastOperation, error)) (pollEnd, string, error) {
	rec := w.Rec
	what := string(rec.Op.Type) + " upstream"
	for {
		var lo *osbclient.LastOperation
		gone := false
		err := u.step(ctx, w, "poll "+what, func(ctx context.Context) error {
			var err error
			lo, err = lastOp(ctx, osbclient.PollRequest{
				ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID, Operation: rec.Upstream.Op.Operation})
			if gone = osbclient.IsStatus(err, http.StatusGone); gone {
				return nil
			}
			return classify(err)
		})
		if err != nil {
			return 0, "", err
		}
		if end, desc, done := ended(lo, gone); done {
			return end, desc, nil
		}
		desc := what + " in progress"
		if lo.Description != "" {
			desc += ": " + lo.Description
		}
		if err := w.Progress(ctx, desc); err != nil {
			return 0, "", err
		}
		if err := w.Wait(ctx, u.cfg.PollInterval, what); err != nil {
			return 0, "", err
		}
	}
}

// delete sends the record's DELETE (an instance's or a binding's, through
// call) as a retried step; gone reports the upstream's 410 (nothing there:
// success).
func (u *Upstream) delete(ctx context.Context, w *engine.Work, what string, call func(context.Context, osbclient.DeleteRequest) (*osbclient.DeleteResponse, error)) (resp *osbclient.DeleteResponse, gone bool, _ error) {
	rec := w.Rec
	err := u.step(ctx, w, what, func(ctx context.Context) (err error) {
		resp, err = call(ctx, osbclient.DeleteRequest{
			Call:      osbclient.Call{AcceptsIncomplete: true, Identity: w.Identity()},
			ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
		if gone = osbclient.IsStatus(err, http.StatusGone); gone {
			return nil
		}
		return classify(err)
	})
	return resp, gone, err
}

// ended says whether a poll's answer ends the operation, and how.
func ended(lo *osbclient.LastOperation, gone bool) (pollEnd, string, bool) {
	switch {
	case gone:
		return endGone, "", true
	case lo.State == osbclient.StateSucceeded:
		return endSucceeded, lo.Description, true
	case lo.State == osbclient.StateFailed:
		desc := lo.Description
		if desc == "" {
			desc = "(no description)"
		}
		return endFailed, desc, true
	}
	return 0, "", false
}

// Update changes the instance's plan or parameters upstream.
func (u *Upstream) Update(ctx context.Context, w *engine.Work) error {
	if w.Rec.Upstream == nil {
		return w.Finish(ctx, errNoState)
	}
	rec := w.Rec
	t, sent := rec.Op.Target, rec.Op.Sent
	if t == nil || sent == nil {
		return w.Finish(ctx, errors.New("update without a target or without the platform's request"))
	}
	if rec.Upstream.Op.OpID != rec.Op.ID {
		// What the platform sent, not the merge.
		req := osbclient.UpdateRequest{
			Call:      osbclient.Call{AcceptsIncomplete: true, Identity: w.Identity()},
			ServiceID: rec.Request.ServiceID, Context: sent.Context, Parameters: sent.Parameters,
			MaintenanceInfo: maintenanceInfo(sent.Maintenance),
		}
		if t.PlanID != rec.Request.PlanID {
			req.PlanID = t.PlanID
		}
		prev, err := json.Marshal(map[string]string{"service_id": rec.Request.ServiceID, "plan_id": rec.Request.PlanID})
		if err != nil {
			return w.Finish(ctx, err)
		}
		req.PreviousValues = prev
		var resp *osbclient.InstanceResponse
		err = u.step(ctx, w, "update upstream", func(ctx context.Context) (err error) {
			resp, err = u.client.Update(ctx, rec.ID, req)
			return classify(err)
		})
		if err != nil {
			return w.Fail(ctx, err)
		}
		if resp.DashboardURL != "" {
			rec.DashboardURL = resp.DashboardURL
		}
		if !resp.Async() {
			return w.Finish(ctx, nil)
		}
		rec.Upstream.Op = engine.UpstreamOp{OpID: rec.Op.ID, Operation: resp.Operation}
		if err := w.Save(ctx); err != nil {
			return err
		}
	}
	end, desc, err := u.pollInstance(ctx, w)
	if err != nil {
		return w.Fail(ctx, err)
	}
	rec.Upstream.Op = engine.UpstreamOp{}
	switch end {
	case endSucceeded:
		return w.Finish(ctx, nil)
	case endGone:
		return w.Finish(ctx, errors.New("the upstream no longer knows the instance"))
	}
	return w.Finish(ctx, fmt.Errorf("the upstream's update failed: %s", desc))
}

// Deprovision unbinds every binding of the instance (each through its own
// worker, so upstream first), then deletes the instance upstream.
func (u *Upstream) Deprovision(ctx context.Context, w *engine.Work) error {
	if w.Rec.Upstream == nil {
		return w.Finish(ctx, errNoState)
	}
	if err := w.RevokeBindings(ctx); err != nil {
		return w.Fail(ctx, err)
	}
	if !w.Rec.Upstream.Attempted {
		return w.Finish(ctx, nil) // nothing was ever sent upstream
	}
	if err := u.deleteInstance(ctx, w); err != nil {
		return w.Fail(ctx, err)
	}
	return w.Finish(ctx, nil)
}

// deleteInstance deletes the instance upstream and waits for the deletion
// to end (410 is success), then records that nothing of ours is left.
func (u *Upstream) deleteInstance(ctx context.Context, w *engine.Work) error {
	rec := w.Rec
	if rec.Upstream.Op.OpID != rec.Op.ID || rec.Op.Type == engine.OpProvision {
		resp, gone, err := u.delete(ctx, w, "deprovision upstream", func(ctx context.Context, req osbclient.DeleteRequest) (*osbclient.DeleteResponse, error) {
			return u.client.Deprovision(ctx, rec.ID, req)
		})
		if err != nil {
			return err
		}
		if gone || !resp.Async() {
			return u.deleted(ctx, w)
		}
		rec.Upstream.Op = engine.UpstreamOp{OpID: rec.Op.ID, Operation: resp.Operation}
		// A provision that deletes its failed creation keeps the
		// deletion's operation to itself: after a crash it polls the
		// creation again, and meets the deletion or nothing.
		if rec.Op.Type != engine.OpProvision {
			if err := w.Save(ctx); err != nil {
				return err
			}
		}
	}
	end, desc, err := u.pollInstance(ctx, w)
	if err != nil {
		return err
	}
	if end == endFailed {
		rec.Upstream.Op = engine.UpstreamOp{}
		return fmt.Errorf("%w: the upstream's deprovision failed: %s", engine.ErrRefused, desc)
	}
	return u.deleted(ctx, w)
}

// deleted records that the upstream has deleted the instance.
func (u *Upstream) deleted(ctx context.Context, w *engine.Work) error {
	crashpoint.Hit(crashpoint.DeprovisionUpstreamDeleted)
	w.Rec.Upstream.Op = engine.UpstreamOp{}
	w.Rec.Upstream.Attempted = w.Rec.Op.Type == engine.OpProvision // a provision creates it again next
	return w.Save(ctx)
}

// maintenanceInfo is the maintenance_info object of a version ("": none).
func maintenanceInfo(version string) *osbclient.MaintenanceInfo {
	if version == "" {
		return nil
	}
	return &osbclient.MaintenanceInfo{Version: version}
}
