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

// maintenanceVersion returns the version a request's maintenance_info
// names, or "" for none. An object with nothing in it ({}, or an empty
// version, which counts as missing) is none: clients generated from the
// spec's OpenAPI document send {} on every PUT and PATCH, so it must be
// the same request, and the same fingerprint, as one without. An object
// that says something but names no version is a bad request: the spec
// makes the version required.
func maintenanceVersion(mi *osbapi.MaintenanceInfo) (string, error) {
	if mi == nil || *mi == (osbapi.MaintenanceInfo{}) {
		return "", nil
	}
	if err := require(field{"maintenance_info.version", mi.Version}); err != nil {
		return "", err
	}
	if err := bounded(field{"maintenance_info.version", mi.Version}); err != nil {
		return "", err
	}
	return mi.Version, nil
}

func decodeProvision(r *http.Request) (engine.ProvisionRequest, error) {
	id, err := pathID(r, "instance_id")
	if err != nil {
		return engine.ProvisionRequest{}, err
	}
	b, async, err := decodeWithBody[osbapi.ProvisionRequest](r)
	if err != nil {
		return engine.ProvisionRequest{}, err
	}
	if err := require(
		field{"service_id", b.ServiceID},
		field{"plan_id", b.PlanID},
		field{"organization_guid", b.OrganizationGUID},
		field{"space_guid", b.SpaceGUID},
	); err != nil {
		return engine.ProvisionRequest{}, err
	}
	if err := bounded(field{"service_id", b.ServiceID}, field{"plan_id", b.PlanID},
		field{"organization_guid", b.OrganizationGUID}, field{"space_guid", b.SpaceGUID}); err != nil {
		return engine.ProvisionRequest{}, err
	}
	ident, objects, err := identityAndObjects(r, objectField{freeParameters, b.Parameters}, objectField{freeContext, b.Context})
	if err != nil {
		return engine.ProvisionRequest{}, err
	}
	mv, err := maintenanceVersion(b.MaintenanceInfo)
	if err != nil {
		return engine.ProvisionRequest{}, err
	}
	return engine.ProvisionRequest{
		MaintenanceVersion: mv,
		InstanceID:         id,
		ServiceID:          b.ServiceID,
		PlanID:             b.PlanID,
		OrganizationGUID:   b.OrganizationGUID,
		SpaceGUID:          b.SpaceGUID,
		Parameters:         objects[0],
		Context:            objects[1],
		AcceptsIncomplete:  async,
		Identity:           ident,
	}, nil
}

func decodeUpdate(r *http.Request) (engine.UpdateRequest, error) {
	id, err := pathID(r, "instance_id")
	if err != nil {
		return engine.UpdateRequest{}, err
	}
	b, async, err := decodeWithBody[osbapi.UpdateRequest](r)
	if err != nil {
		return engine.UpdateRequest{}, err
	}
	if err := require(field{"service_id", b.ServiceID}); err != nil {
		return engine.UpdateRequest{}, err
	}
	if err := bounded(field{"service_id", b.ServiceID}, field{"plan_id", b.PlanID}); err != nil {
		return engine.UpdateRequest{}, err
	}
	ident, objects, err := identityAndObjects(r, objectField{freeParameters, b.Parameters}, objectField{freeContext, b.Context})
	if err != nil {
		return engine.UpdateRequest{}, err
	}
	mv, err := maintenanceVersion(b.MaintenanceInfo)
	if err != nil {
		return engine.UpdateRequest{}, err
	}
	return engine.UpdateRequest{
		MaintenanceVersion: mv,
		InstanceID:         id,
		ServiceID:          b.ServiceID,
		// Absent and empty both mean "keep the plan", as the engine expects.
		PlanID:            b.PlanID,
		Parameters:        objects[0],
		Context:           objects[1],
		AcceptsIncomplete: async,
		Identity:          ident,
	}, nil
}

func decodeDeprovision(r *http.Request) (engine.DeprovisionRequest, error) {
	id, err := pathID(r, "instance_id")
	if err != nil {
		return engine.DeprovisionRequest{}, err
	}
	d, err := decodeDeletion(r)
	if err != nil {
		return engine.DeprovisionRequest{}, err
	}
	return engine.DeprovisionRequest{
		InstanceID:        id,
		ServiceID:         d.serviceID,
		PlanID:            d.planID,
		AcceptsIncomplete: d.async,
		Identity:          d.identity,
	}, nil
}

func (h *Handler) getInstance(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "instance_id")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v, err := h.instances.GetInstance(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if v == nil {
		h.fail(w, r, errors.New("engine returned neither an instance nor an error"))
		return
	}
	body := osbapi.Instance{ServiceID: v.ServiceID, PlanID: v.PlanID, Parameters: v.Parameters, DashboardURL: v.DashboardURL}
	if v.MaintenanceVersion != "" {
		mi, err := json.Marshal(osbapi.MaintenanceInfo{Version: v.MaintenanceVersion, Description: v.MaintenanceDescription})
		if err != nil {
			h.fail(w, r, fmt.Errorf("encode maintenance_info: %w", err))
			return
		}
		body.MaintenanceInfo = mi
	}
	h.respond(w, r, http.StatusOK, body)
}

func (h *Handler) instanceLastOperation(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "instance_id")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answerPoll(w, r, func(ctx context.Context, operation string) (engine.LastOperation, error) {
		return h.instances.InstanceLastOperation(ctx, id, operation)
	})
}

// answerPoll answers a last_operation poll whose path ids are read: poll
// asks the engine with the query's operation id. service_id and plan_id
// are hints the engine does not need: the operation id and the record
// answer the poll.
func (h *Handler) answerPoll(w http.ResponseWriter, r *http.Request, poll func(ctx context.Context, operation string) (engine.LastOperation, error)) {
	q, err := query(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	op, err := poll(r.Context(), q.Get("operation"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondLastOperation(w, r, op)
}

// respondResult answers a state-changing call. created is the status of
// OutcomeCreated: 201 for provision and bind, 200 for the calls whose spec
// has no 201 (update, deprovision, unbind).
// changing returns the handler of a state-changing endpoint: decode the
// request, call the engine, answer with the result (created is the status
// of OutcomeCreated).
func changing[R any](h *Handler, decode func(*http.Request) (R, error), call func(context.Context, R) (engine.Result, error), created int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := decode(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		res, err := call(r.Context(), req)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.respondResult(w, r, res, created)
	}
}

func (h *Handler) respondResult(w http.ResponseWriter, r *http.Request, res engine.Result, created int) {
	switch {
	case res.DashboardURL != "" && (res.Outcome == engine.OutcomeCreated || res.Outcome == engine.OutcomeOK):
		status := http.StatusOK
		if res.Outcome == engine.OutcomeCreated {
			status = created
		}
		h.respond(w, r, status, osbapi.InstanceResponse{DashboardURL: res.DashboardURL})
		return
	}
	switch res.Outcome {
	case engine.OutcomeCreated:
		h.respond(w, r, created, emptyBody{})
	case engine.OutcomeOK:
		h.respond(w, r, http.StatusOK, emptyBody{})
	case engine.OutcomeAccepted:
		h.respond(w, r, http.StatusAccepted, osbapi.OperationResponse{Operation: res.Operation})
	default:
		h.fail(w, r, fmt.Errorf("engine returned unknown outcome %d", res.Outcome))
	}
}

func (h *Handler) respondLastOperation(w http.ResponseWriter, r *http.Request, op engine.LastOperation) {
	if op.Gone {
		h.respond(w, r, http.StatusGone, emptyBody{})
		return
	}
	switch op.State {
	case engine.OpInProgress, engine.OpSucceeded, engine.OpFailed:
		h.respond(w, r, http.StatusOK, osbapi.LastOperation{State: string(op.State), Description: op.Description})
	default:
		h.fail(w, r, fmt.Errorf("engine returned unknown operation state %q", op.State))
	}
}
