package osbapi

import (
	"encoding/json"
	"testing"
)

// TestRequestBytes pins the bodies the upstream client sends: field names,
// their order and what is left out when empty. An upstream broker may keep
// or compare what it was sent.
func TestRequestBytes(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	cases := map[string]struct {
		reason string
		v      any
		want   string
	}{
		"provision, everything": {reason: "every field, in the order of the type",
			v: ProvisionRequest{Call: Call{AcceptsIncomplete: true, Identity: "cf e30="}, ServiceID: "s", PlanID: "p", OrganizationGUID: "o", SpaceGUID: "sp",
				Context: raw(`{"platform":"cf"}`), Parameters: raw(`{"a":1}`), MaintenanceInfo: &MaintenanceInfo{Version: "1.0.0"}},
			want: `{"service_id":"s","plan_id":"p","organization_guid":"o","space_guid":"sp","context":{"platform":"cf"},"parameters":{"a":1},"maintenance_info":{"version":"1.0.0"}}`},
		"provision, least": {reason: "the ids only; the call's query and header are not in the body",
			v: ProvisionRequest{Call: Call{AcceptsIncomplete: true}, ServiceID: "s", PlanID: "p"}, want: `{"service_id":"s","plan_id":"p"}`},
		"update, everything": {reason: "previous_values before maintenance_info",
			v: UpdateRequest{ServiceID: "s", PlanID: "p2", Context: raw(`{}`), Parameters: raw(`{"b":2}`), PreviousValues: raw(`{"plan_id":"p"}`),
				MaintenanceInfo: &MaintenanceInfo{Version: "2"}},
			want: `{"service_id":"s","plan_id":"p2","context":{},"parameters":{"b":2},"previous_values":{"plan_id":"p"},"maintenance_info":{"version":"2"}}`},
		"update, plan kept": {reason: "no plan_id when the plan does not change",
			v: UpdateRequest{ServiceID: "s"}, want: `{"service_id":"s"}`},
		"bind, everything": {reason: "every field, in the order of the type",
			v:    BindRequest{ServiceID: "s", PlanID: "p", AppGUID: "a", BindResource: raw(`{"app_guid":"a"}`), Context: raw(`{}`), Parameters: raw(`{}`), PredecessorBindingID: "b0"},
			want: `{"service_id":"s","plan_id":"p","app_guid":"a","bind_resource":{"app_guid":"a"},"context":{},"parameters":{},"predecessor_binding_id":"b0"}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("encoded %s\nwant    %s\n%s", got, tc.want, tc.reason)
			}
		})
	}
}

// TestBindingRedacted: a Binding printed or logged shows no credentials.
func TestBindingRedacted(t *testing.T) {
	b := Binding{Status: 201, Credentials: json.RawMessage(`{"password":"hunter2"}`)}
	for _, s := range []string{b.String(), b.LogValue().String()} {
		if want := "binding{status 201, operation \"\", credentials 22 bytes (redacted)}"; s != want {
			t.Errorf("%q, want %q", s, want)
		}
	}
}
