package catalog

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const (
	svc       = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	standard  = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	readOnly  = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b12"
	versioned = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b14"
)

func TestDefaultCatalogServedWithoutOwnConfig(t *testing.T) {
	c := Default()
	js, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "bucketbroker\"") || strings.Contains(string(js), "asyncRequired") ||
		strings.Contains(string(js), `"versioning"`) {
		t.Errorf("served catalog leaks bucketbroker plan config: %s", js)
	}
	var doc struct {
		Services []struct {
			Name                 string `json:"name"`
			Bindable             bool   `json:"bindable"`
			InstancesRetrievable bool   `json:"instances_retrievable"`
			BindingsRetrievable  bool   `json:"bindings_retrievable"`
			PlanUpdateable       bool   `json:"plan_updateable"`
			Plans                []struct {
				Name    string          `json:"name"`
				Schemas json.RawMessage `json:"schemas"`
			} `json:"plans"`
		} `json:"services"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Services[0]
	if s.Name != "s3-bucket" || !s.Bindable || !s.InstancesRetrievable || !s.BindingsRetrievable || !s.PlanUpdateable {
		t.Errorf("service = %+v, want s3-bucket bindable, retrievable, plan_updateable", s)
	}
	if len(s.Plans) < 2 || s.Plans[0].Name != "standard" || s.Plans[1].Name != "read-only-bindings" {
		t.Fatalf("plans = %+v", s.Plans)
	}
	for _, p := range s.Plans {
		if len(p.Schemas) == 0 {
			t.Errorf("plan %s has no schemas", p.Name)
		}
	}
	// The internal model still has the config after serving.
	p, err := c.Lookup(svc, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	if p.Settings().DefaultAccess() != "read-only" || p.Settings().AllowsAccess("read-write") {
		t.Errorf("read-only plan settings = %+v", p.Settings())
	}
}

func TestDefaultCatalogVersioning(t *testing.T) {
	c := Default()
	for name, tc := range map[string]struct {
		reason string
		plan   string
		want   bool
	}{
		"standard":  {"the default plan leaves versioning alone", standard, false},
		"read-only": {"only the versioned plan turns it on", readOnly, false},
		"versioned": {"the versioned plan keeps every version", versioned, true},
	} {
		p, err := c.Lookup(svc, tc.plan)
		if err != nil {
			t.Fatalf("%s: Lookup: %v", name, err)
		}
		if got := p.Settings().Versioning; got != tc.want {
			t.Errorf("%s: Versioning = %v, want %v: %s", name, got, tc.want, tc.reason)
		}
	}
	p, _ := c.Lookup(svc, versioned)
	if p.Name != "versioned" || !p.Updateable() || p.Settings().DefaultAccess() != "read-write" || !p.Settings().AllowsAccess("read-only") {
		t.Errorf("versioned plan = %s updateable %v settings %+v, want updateable with standard's access modes", p.Name, p.Updateable(), p.Settings())
	}
	if err := p.Validate(ForCreate, json.RawMessage(`{"purge_on_delete":true,"labels":{"team":"a"}}`)); err != nil {
		t.Errorf("versioned plan: Validate(standard's parameters) = %v, want nil", err)
	}
	if err := p.Validate(ForCreate, json.RawMessage(`{"versioning":false}`)); err == nil {
		t.Error("versioned plan: Validate({versioning:false}) = nil, want an error: versioning is the plan's, not a parameter")
	}
}

func TestLookup(t *testing.T) {
	c := Default()
	if _, err := c.Lookup(svc, standard); err != nil {
		t.Errorf("Lookup(standard) = %v", err)
	}
	for name, tc := range map[string]struct{ service, plan, want string }{
		"unknown service": {"nope", standard, `service_id "nope"`},
		"unknown plan":    {svc, "nope", `plan_id "nope"`},
	} {
		_, err := c.Lookup(tc.service, tc.plan)
		if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Lookup = %v, want ErrUnknown mentioning %s", name, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	p, _ := Default().Lookup(svc, standard)
	ro, _ := Default().Lookup(svc, readOnly)
	for name, tc := range map[string]struct {
		plan    *Plan
		purpose string
		params  string
		wantErr string
	}{
		"empty":             {p, ForCreate, ``, ""},
		"good create":       {p, ForCreate, `{"purge_on_delete":true,"labels":{"team":"a"}}`, ""},
		"unknown property":  {p, ForCreate, `{"size":"xl"}`, "additional"},
		"wrong type":        {p, ForCreate, `{"purge_on_delete":"yes"}`, "/purge_on_delete"},
		"bad label key":     {p, ForUpdate, `{"labels":{"Bad Key":"x"}}`, "Bad Key"},
		"bind access ok":    {p, ForBind, `{"access":"read-only"}`, ""},
		"bind access bad":   {p, ForBind, `{"access":"admin"}`, "/access"},
		"read-only plan rw": {ro, ForBind, `{"access":"read-write"}`, "/access"},
		"read-only plan ro": {ro, ForBind, `{"access":"read-only"}`, ""},
	} {
		err := tc.plan.Validate(tc.purpose, json.RawMessage(tc.params))
		if tc.wantErr == "" && err != nil {
			t.Errorf("%s: Validate = %v, want nil", name, err)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want error containing %q", name, err, tc.wantErr)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":         `services: []`,
		"unknown field": `{"services":[{"id":"s","name":"n","description":"d","bogus":1,"plans":[{"id":"p","name":"p","description":"d"}]}]}`,
		"duplicate id":  `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"s","name":"p","description":"d"}]}]}`,
		"bad access":    `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","bucketbroker":{"access":["root"]}}]}]}`,
		"broken schema": `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","schemas":{"service_instance":{"create":{"parameters":{"type":12}}}}}]}]}`,
		"no plans":      `{"services":[{"id":"s","name":"n","description":"d","plans":[]}]}`,
		"not yaml":      "services: [",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: Parse succeeded, want error", name)
		}
	}
}
