package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// lastBody decodes the body of the last create or update the ill broker
// got for instance id, field by field as sent.
func (e *env) lastBody(id string) map[string]json.RawMessage {
	e.t.Helper()
	in := e.ib.State().Instances[id]
	if in == nil {
		e.t.Fatalf("the upstream never saw instance %s", id)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(in.LastBody, &body); err != nil {
		e.t.Fatalf("last body of %s: %v", id, err)
	}
	return body
}

func TestForwardsWhatThePlatformSent(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	want := func(id, what, field, value string) {
		t.Helper()
		got, ok := e.lastBody(id)[field]
		switch {
		case value == "" && ok:
			t.Errorf("%s: the upstream got %s %s, which the platform did not send", what, field, got)
		case value != "" && string(got) != value:
			t.Errorf("%s: the upstream got %s %s, want %s as sent", what, field, got, value)
		}
	}
	// A provision without maintenance_info forwards none, although the
	// plan has a version and the record holds it.
	if _, err := e.eng.Provision(ctx, provision("i-m", illbroker.PlanSync, false, `{"size":"small","tier":"gold"}`)); err != nil {
		t.Fatal(err)
	}
	want("i-m", "provision", "maintenance_info", "")
	want("i-m", "provision", "parameters", `{"size":"small","tier":"gold"}`)
	want("i-m", "provision", "context", `{"platform":"kubernetes","namespace":"ns1"}`)

	// An update forwards only the parameters it changes, no context and
	// no maintenance_info when the platform sent none.
	if _, err := e.eng.Update(ctx, engine.UpdateRequest{InstanceID: "i-m", ServiceID: illbroker.ServiceID,
		Parameters: json.RawMessage(`{"size":"large"}`), Identity: identity}); err != nil {
		t.Fatal(err)
	}
	want("i-m", "update", "parameters", `{"size":"large"}`)
	want("i-m", "update", "maintenance_info", "")
	want("i-m", "update", "context", "")
	if v, err := e.eng.GetInstance(ctx, "i-m"); err != nil || string(v.Parameters) != `{"size":"large","tier":"gold"}` {
		t.Fatalf("GET instance after the update: %+v, %v; want the merged parameters", v, err)
	}

	// One that asks for the plan's version and sends a context forwards
	// both.
	if _, err := e.eng.Update(ctx, engine.UpdateRequest{InstanceID: "i-m", ServiceID: illbroker.ServiceID,
		Parameters: json.RawMessage(`{"size":"huge"}`), MaintenanceVersion: illbroker.MaintenanceVersion,
		Context: json.RawMessage(`{"platform":"kubernetes","namespace":"ns2"}`)}); err != nil {
		t.Fatal(err)
	}
	want("i-m", "upgrade", "parameters", `{"size":"huge"}`)
	want("i-m", "upgrade", "maintenance_info", `{"version":"`+illbroker.MaintenanceVersion+`"}`)
	want("i-m", "upgrade", "context", `{"platform":"kubernetes","namespace":"ns2"}`)

	// A provision that names the version forwards it.
	req := provision("i-m2", illbroker.PlanSync, false, "")
	req.MaintenanceVersion = illbroker.MaintenanceVersion
	if _, err := e.eng.Provision(ctx, req); err != nil {
		t.Fatal(err)
	}
	want("i-m2", "provision with maintenance_info", "maintenance_info", `{"version":"`+illbroker.MaintenanceVersion+`"}`)
	want("i-m2", "provision with maintenance_info", "parameters", "")
	e.noErrorLines()
}

func TestDeprovisionUnbindsWithItsIdentity(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	if _, err := e.eng.Provision(ctx, provision("i-d", illbroker.PlanSync, false, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Bind(ctx, bind("i-d", "b-d")); err != nil {
		t.Fatal(err)
	}
	const bob = "kubernetes eyJ1c2VybmFtZSI6ImJvYiJ9"
	if _, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "i-d", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync, Identity: bob}); err != nil {
		t.Fatal(err)
	}
	st := e.ib.State()
	if bs := st.Bindings["b-d"]; bs.Exists || bs.Identity != bob {
		t.Fatalf("upstream binding after the deprovision: %+v, want unbound with the deprovision's identity %q", bs, bob)
	}
	if in := st.Instances["i-d"]; in.Exists || in.Identity != bob {
		t.Fatalf("upstream instance after the deprovision: %+v", in)
	}
}

func TestAdoptedInstanceHasItsDashboard(t *testing.T) {
	for _, plan := range []string{illbroker.PlanSync, illbroker.PlanAsync} {
		t.Run(plan, func(t *testing.T) {
			lose := firstPUT()
			e := newEnv(t, envOpts{illArgs: []string{"-duplicate-status", "409", "-async-delay", "100ms"},
				via: func(u *url.URL) string { return lossy(t, u, lose) }})
			ctx := context.Background()
			res, err := e.eng.Provision(ctx, provision("i-dash", plan, true, ""))
			if err != nil {
				t.Fatalf("provision whose first answer was lost: %v", err)
			}
			if res.Outcome == engine.OutcomeAccepted {
				if lo := e.waitOp(engine.KindInstance, "", "i-dash", res.Operation); lo.State != engine.OpSucceeded {
					t.Fatalf("provision ended %+v", lo)
				}
			}
			if in := e.ib.State().Instances["i-dash"]; in.Creates != 1 {
				t.Fatalf("upstream instance: %+v, want one create (adopted)", in)
			}
			const dash = "https://dashboard.example/si-i-dash"
			if v, err := e.eng.GetInstance(ctx, "i-dash"); err != nil || v.DashboardURL != dash {
				t.Fatalf("GET instance of the adopted instance: %+v, %v; want dashboard_url %q from the upstream's GET", v, err, dash)
			}
			if res, err := e.eng.Provision(ctx, provision("i-dash", plan, true, "")); err != nil || res.DashboardURL != dash {
				t.Fatalf("provision again: %+v, %v; want dashboard_url %q", res, err, dash)
			}
			e.noErrorLines()
		})
	}
}

func TestRotationOfAPlanNotRotatableIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	if _, err := e.eng.Provision(ctx, provision("i-rot", illbroker.PlanSync, false, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Bind(ctx, bind("i-rot", "b-old")); err != nil {
		t.Fatal(err)
	}
	req := bind("i-rot", "b-new")
	req.PredecessorBindingID = "b-old"
	_, err := e.eng.Bind(ctx, req)
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "binding_rotatable") {
		t.Fatalf("rotation on a plan the upstream does not say binding_rotatable for: %v, want 400 saying so", err)
	}
	if bs := e.ib.State().Bindings["b-new"]; bs != nil {
		t.Fatalf("the refused rotation reached the upstream: %+v", bs)
	}
}
