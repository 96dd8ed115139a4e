package osb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbapi"
)

// credentialsOf is the credentials a bind or GET answers: an upstream's as
// it gave them, else the bucket's (nil when there are none).
func credentialsOf(c *engine.Credentials, raw json.RawMessage) (json.RawMessage, error) {
	if raw != nil || c == nil {
		return raw, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode credentials: %w", err)
	}
	return b, nil
}

func decodeBind(r *http.Request) (engine.BindRequest, error) {
	instanceID, bindingID, err := bindingIDs(r)
	if err != nil {
		return engine.BindRequest{}, err
	}
	b, async, err := decodeWithBody[osbapi.BindRequest](r)
	if err != nil {
		return engine.BindRequest{}, err
	}
	if err := require(field{"service_id", b.ServiceID}, field{"plan_id", b.PlanID}); err != nil {
		return engine.BindRequest{}, err
	}
	if err := bounded(field{"service_id", b.ServiceID}, field{"plan_id", b.PlanID}, field{"app_guid", b.AppGUID},
		field{"predecessor_binding_id", b.PredecessorBindingID}); err != nil {
		return engine.BindRequest{}, err
	}
	ident, objects, err := identityAndObjects(r, objectField{freeBindResource, b.BindResource},
		objectField{freeParameters, b.Parameters}, objectField{freeContext, b.Context})
	if err != nil {
		return engine.BindRequest{}, err
	}
	return engine.BindRequest{
		InstanceID:        instanceID,
		BindingID:         bindingID,
		ServiceID:         b.ServiceID,
		PlanID:            b.PlanID,
		AppGUID:           b.AppGUID,
		BindResource:      objects[0],
		Parameters:        objects[1],
		Context:           objects[2],
		AcceptsIncomplete: async,
		Identity:          ident,

		PredecessorBindingID: b.PredecessorBindingID,
	}, nil
}

func decodeUnbind(r *http.Request) (engine.UnbindRequest, error) {
	instanceID, bindingID, err := bindingIDs(r)
	if err != nil {
		return engine.UnbindRequest{}, err
	}
	d, err := decodeDeletion(r)
	if err != nil {
		return engine.UnbindRequest{}, err
	}
	return engine.UnbindRequest{
		InstanceID:        instanceID,
		BindingID:         bindingID,
		ServiceID:         d.serviceID,
		PlanID:            d.planID,
		AcceptsIncomplete: d.async,
		Identity:          d.identity,
	}, nil
}

// bindingIDs returns the two path ids of a binding route.
func bindingIDs(r *http.Request) (instanceID, bindingID string, err error) {
	if instanceID, err = pathID(r, "instance_id"); err != nil {
		return "", "", err
	}
	if bindingID, err = pathID(r, "binding_id"); err != nil {
		return "", "", err
	}
	return instanceID, bindingID, nil
}

func (h *Handler) bind(w http.ResponseWriter, r *http.Request) {
	req, err := decodeBind(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.bindings.Bind(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	switch res.Outcome {
	case engine.OutcomeAccepted:
		// Never credentials in a 202, even if the engine had them: the
		// platform fetches them with GET once the operation succeeded.
		h.respond(w, r, http.StatusAccepted, osbapi.OperationResponse{Operation: res.Operation})
	case engine.OutcomeCreated, engine.OutcomeOK:
		creds, err := credentialsOf(res.Credentials, res.RawCredentials)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if creds == nil {
			h.fail(w, r, errors.New("engine returned a finished binding without credentials"))
			return
		}
		status := http.StatusOK
		if res.Outcome == engine.OutcomeCreated {
			status = http.StatusCreated
		}
		h.respond(w, r, status, osbapi.Binding{Credentials: creds})
	default:
		h.fail(w, r, fmt.Errorf("engine returned unknown outcome %d", res.Outcome))
	}
}

func (h *Handler) getBinding(w http.ResponseWriter, r *http.Request) {
	instanceID, bindingID, err := bindingIDs(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v, err := h.bindings.GetBinding(r.Context(), instanceID, bindingID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if v == nil {
		h.fail(w, r, errors.New("engine returned neither a binding nor an error"))
		return
	}
	creds, err := credentialsOf(v.Credentials, v.RawCredentials)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.respond(w, r, http.StatusOK, osbapi.Binding{Credentials: creds, Parameters: v.Parameters})
}

func (h *Handler) bindingLastOperation(w http.ResponseWriter, r *http.Request) {
	instanceID, bindingID, err := bindingIDs(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answerPoll(w, r, func(ctx context.Context, operation string) (engine.LastOperation, error) {
		return h.bindings.BindingLastOperation(ctx, instanceID, bindingID, operation)
	})
}
