package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// errNoCredentials is a look's verdict on a binding that exists upstream
// but whose credentials cannot be fetched: it is unbound and bound anew.
var errNoCredentials = errors.New("the binding exists upstream and its credentials cannot be fetched again")

// Bind creates the binding upstream under the record's id and records its
// credentials, sealed, before anyone is given them. Once they are recorded
// the upstream is never asked for them again.
func (u *Upstream) Bind(ctx context.Context, w *engine.Work) error {
	if w.Rec.Upstream == nil {
		return w.Finish(ctx, errNoState)
	}
	rec := w.Rec
	if len(rec.SealedSecret) > 0 {
		return w.Finish(ctx, nil) // recorded before a crash
	}
	var creds json.RawMessage
	if rec.Upstream.Op.OpID == rec.Op.ID {
		c, err := u.bindPolled(ctx, w)
		if err != nil {
			return w.Fail(ctx, err)
		}
		creds = c
	} else {
		sent := rec.Upstream.Attempted
		if !sent {
			rec.Upstream.Attempted = true
			if err := w.Save(ctx); err != nil {
				return err
			}
		}
		c, err := u.createBinding(ctx, w, &sent)
		if errors.Is(err, engine.ErrNotOurs) {
			rec.Upstream.Attempted = false // an unbind must not delete it
		}
		if err != nil {
			return w.Fail(ctx, err)
		}
		creds = c
	}
	if len(creds) == 0 || string(creds) == "null" {
		creds = json.RawMessage("{}")
	}
	if err := w.SealCredentials(creds); err != nil {
		return w.Finish(ctx, err)
	}
	rec.Upstream.Op = engine.UpstreamOp{}
	if err := w.Save(ctx); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.BindUpstreamRecorded)
	return w.Finish(ctx, nil)
}

// createBinding sends the bind until it has the binding's credentials. A
// 202 is recorded and polled; an answer that may hide an existing binding
// is looked into.
func (u *Upstream) createBinding(ctx context.Context, w *engine.Work, sent *bool) (json.RawMessage, error) {
	rec := w.Rec
	req := osbclient.BindRequest{
		Call:      osbclient.Call{AcceptsIncomplete: true, Identity: w.Identity()},
		ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID, AppGUID: rec.Request.AppGUID,
		BindResource: rec.Request.BindResource, Context: rec.Request.Context, Parameters: rec.Request.Parameters,
		PredecessorBindingID: rec.Request.Predecessor,
	}
	var creds json.RawMessage
	var accepted *osbclient.Binding
	err := u.step(ctx, w, "bind upstream", func(ctx context.Context) error {
		b, err := u.client.Bind(ctx, rec.InstanceID, rec.ID, req)
		prior := *sent
		*sent = true
		if err == nil {
			if b.Async() {
				accepted = b
			} else {
				creds = b.Credentials
			}
			return nil
		}
		if osbclient.IsStatus(err, http.StatusConflict) && !prior {
			return fmt.Errorf("the upstream has a binding %s that bucketbroker did not create: %w: %w", rec.ID, engine.ErrNotOurs, err)
		}
		if refused(err) {
			return classify(err)
		}
		c, found, lerr := u.lookBinding(ctx, w)
		switch {
		case errors.Is(lerr, errNoCredentials):
			return fmt.Errorf("%w; unbound it upstream to bind it anew", lerr)
		case lerr != nil:
			return fmt.Errorf("%w (and a look at the binding failed: %w)", err, lerr)
		case !found:
			return err // not there: send it again
		}
		creds = c
		return nil
	})
	crashpoint.Hit(crashpoint.BindUpstreamAnswered)
	if err != nil || accepted == nil {
		return creds, err
	}
	rec.Upstream.Op = engine.UpstreamOp{OpID: rec.Op.ID, Operation: accepted.Operation}
	if err := w.Save(ctx); err != nil {
		return nil, err
	}
	return u.bindPolled(ctx, w)
}

// lookBinding asks the upstream for the binding: where the service is
// bindings_retrievable, a GET returns its credentials; elsewhere it is
// unbound (nobody was given its credentials), to be bound anew.
func (u *Upstream) lookBinding(ctx context.Context, w *engine.Work) (json.RawMessage, bool, error) {
	rec := w.Rec
	if u.service(rec.Request.ServiceID).BindingsRetrievable {
		b, err := u.client.GetBinding(ctx, rec.InstanceID, rec.ID, osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
		switch {
		case notFound(err):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		w.Logger().Info("Adopted the upstream binding of an earlier attempt", "upstream", u.cfg.Name, "id", rec.ID, "instance", rec.InstanceID)
		return b.Credentials, true, nil
	}
	_, err := u.client.Unbind(ctx, rec.InstanceID, rec.ID, osbclient.DeleteRequest{
		Call: osbclient.Call{AcceptsIncomplete: true}, ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
	if err != nil && !notFound(err) {
		return nil, false, err
	}
	w.Logger().Info("Unbound an upstream binding whose credentials nobody was given, to bind it anew",
		"upstream", u.cfg.Name, "id", rec.ID, "instance", rec.InstanceID)
	return nil, false, errNoCredentials
}

// bindPolled polls the upstream's asynchronous bind to its end, then
// fetches the credentials (the spec requires bindings_retrievable of a
// broker that binds asynchronously).
func (u *Upstream) bindPolled(ctx context.Context, w *engine.Work) (json.RawMessage, error) {
	rec := w.Rec
	end, desc, err := u.pollBinding(ctx, w)
	if err != nil {
		return nil, err
	}
	switch end {
	case endFailed:
		return nil, fmt.Errorf("the upstream's bind failed: %s", desc)
	case endGone:
		return nil, errors.New("the upstream no longer knows the binding it was creating")
	}
	var creds json.RawMessage
	err = u.step(ctx, w, "fetch upstream credentials", func(ctx context.Context) error {
		b, err := u.client.GetBinding(ctx, rec.InstanceID, rec.ID, osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID})
		if err != nil {
			return classify(err)
		}
		creds = b.Credentials
		return nil
	})
	return creds, err
}

// pollBinding is pollInstance for a binding.
func (u *Upstream) pollBinding(ctx context.Context, w *engine.Work) (pollEnd, string, error) {
	return u.poll(ctx, w, func(ctx context.Context, req osbclient.PollRequest) (*osbclient.LastOperation, error) {
		return u.client.BindingLastOperation(ctx, w.Rec.InstanceID, w.Rec.ID, req)
	})
}

// Unbind deletes the binding upstream (410 is success); the engine then
// forgets its credentials.
func (u *Upstream) Unbind(ctx context.Context, w *engine.Work) error {
	if w.Rec.Upstream == nil {
		return w.Finish(ctx, errNoState)
	}
	rec := w.Rec
	if !rec.Upstream.Attempted {
		return w.Finish(ctx, nil) // nothing was ever sent upstream
	}
	if rec.Upstream.Op.OpID != rec.Op.ID {
		resp, gone, err := u.delete(ctx, w, "unbind upstream", func(ctx context.Context, req osbclient.DeleteRequest) (*osbclient.DeleteResponse, error) {
			return u.client.Unbind(ctx, rec.InstanceID, rec.ID, req)
		})
		if err != nil {
			return w.Fail(ctx, err)
		}
		if !gone && resp.Async() {
			rec.Upstream.Op = engine.UpstreamOp{OpID: rec.Op.ID, Operation: resp.Operation}
			if err := w.Save(ctx); err != nil {
				return err
			}
		}
	}
	if rec.Upstream.Op.OpID == rec.Op.ID {
		end, desc, err := u.pollBinding(ctx, w)
		if err != nil {
			return w.Fail(ctx, err)
		}
		if end == endFailed {
			rec.Upstream.Op = engine.UpstreamOp{}
			return w.Finish(ctx, fmt.Errorf("the upstream's unbind failed: %s", desc))
		}
	}
	crashpoint.Hit(crashpoint.UnbindUpstreamDeleted)
	rec.Upstream.Op, rec.Upstream.Attempted = engine.UpstreamOp{}, false
	return w.Finish(ctx, nil)
}
