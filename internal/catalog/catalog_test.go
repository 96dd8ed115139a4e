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

// TestLookupIDsWithSlashes: the ids are the key as given, not joined
// into one string, in which service "a/b" with plan "c" and service "a"
// with plan "b/c" would be one key and one of them the other's plan.
func TestLookupIDsWithSlashes(t *testing.T) {
	c, err := Parse([]byte(`{"services":[
		{"id":"a/b","name":"one","description":"d","plans":[{"id":"c","name":"pc","description":"d"}]},
		{"id":"a","name":"two","description":"d","plans":[{"id":"b/c","name":"pbc","description":"d"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ service, plan, want string }{{"a/b", "c", "pc"}, {"a", "b/c", "pbc"}} {
		p, err := c.Lookup(tc.service, tc.plan)
		if err != nil {
			t.Fatalf("Lookup(%q, %q): %v", tc.service, tc.plan, err)
		}
		if p.Name != tc.want {
			t.Errorf("Lookup(%q, %q) = plan %q, want %q", tc.service, tc.plan, p.Name, tc.want)
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
		"empty":                               `services: []`,
		"unknown field":                       `{"services":[{"id":"s","name":"n","description":"d","bogus":1,"plans":[{"id":"p","name":"p","description":"d"}]}]}`,
		"duplicate id":                        `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"s","name":"p","description":"d"}]}]}`,
		"bad access":                          `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","bucketbroker":{"access":["root"]}}]}]}`,
		"broken schema":                       `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","schemas":{"service_instance":{"create":{"parameters":{"type":12}}}}}]}]}`,
		"no plans":                            `{"services":[{"id":"s","name":"n","description":"d","plans":[]}]}`,
		"maintenance_info.version not semver": `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","maintenance_info":{"version":"1.0"}}]}]}`,
		"maintenance_info without version":    `{"services":[{"id":"s","name":"n","description":"d","plans":[{"id":"p","name":"p","description":"d","maintenance_info":{"description":"x"}}]}]}`,
		"not yaml":                            "services: [",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: Parse succeeded, want error", name)
		}
	}
}

// TestDefaultCatalogMaintenanceInfo: every built-in plan has a semantic
// maintenance_info.version with a description, served in the catalog.
func TestDefaultCatalogMaintenanceInfo(t *testing.T) {
	js, err := Default().JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services []struct {
			Plans []struct {
				Name            string          `json:"name"`
				MaintenanceInfo MaintenanceInfo `json:"maintenance_info"`
			} `json:"plans"`
		} `json:"services"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Services[0].Plans {
		if mi := p.MaintenanceInfo; !semver.MatchString(mi.Version) || mi.Description == "" {
			t.Errorf("plan %s: maintenance_info = %+v", p.Name, mi)
		}
	}
}

// TestDefaultCatalogSchemas: every built-in plan states what it accepts for
// provision, update and bind; a plan without a binding schema accepted any
// object as binding parameters, which end users reach.
func TestDefaultCatalogSchemas(t *testing.T) {
	c := Default()
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("built-in catalog warnings:\n%s", strings.Join(w, "\n"))
	}
	for _, s := range c.Services {
		for _, p := range s.Plans {
			for purpose, params := range map[string]string{
				ForCreate: `{"unknown":{"a":1}}`,
				ForUpdate: `{"unknown":{"a":1}}`,
				ForBind:   `{"unknown":{"a":1}}`,
			} {
				if err := p.Validate(purpose, json.RawMessage(params)); err == nil {
					t.Errorf("plan %s accepts unknown %s parameters", p.Name, purpose)
				}
			}
		}
	}
}

// TestDefaultCatalogLabels: the labels schema states S3's tag character
// set and lengths (driver.CheckTags holds the byte length, which JSON
// Schema cannot state).
func TestDefaultCatalogLabels(t *testing.T) {
	p, err := Default().Lookup(svc, standard)
	if err != nil {
		t.Fatal(err)
	}
	for value, ok := range map[string]bool{
		`"data-eng"`:                         true,
		`"Größe über 5 ünd 日本"`:              true,
		`"a_b.c:d/e=f+g-h@i j"`:              true,
		`""`:                                 true,
		`"☃"`:                                false,
		`"a&b"`:                              false,
		`"a,b"`:                              false,
		`"a\u0001b"`:                         false,
		`"a\tb"`:                             false,
		`"` + strings.Repeat("x", 257) + `"`: false,
	} {
		err := p.Validate(ForCreate, json.RawMessage(`{"labels":{"k":`+value+`}}`))
		if (err == nil) != ok {
			t.Errorf("label value %s: Validate = %v, want ok=%v", value, err, ok)
		}
	}
}

func TestUserCatalogWarnings(t *testing.T) {
	c, err := Parse([]byte(`
services:
  - id: s
    name: svc
    description: d
    bindable: true
    plans:
      - id: p1
        name: loose
        description: no schemas
      - id: p2
        name: unbindable
        description: provision schema only
        bindable: false
        schemas:
          service_instance:
            create:
              parameters: {type: object}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		`plan "loose" of service "svc" has no parameters schema for provision, update, bind`,
		`plan "unbindable" of service "svc" has no parameters schema for update:`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings:\n%s\nwant a line containing %q", got, want)
		}
	}
}

// TestDefaultCatalogDescriptions: each plan's description says what the
// plan does: every access mode its bindings may have, that it keeps object
// versions, and which operations it answers asynchronously only (update
// among them: a change made synchronously is refused too).
func TestDefaultCatalogDescriptions(t *testing.T) {
	for _, s := range Default().Services {
		for _, p := range s.Plans {
			cfg := p.Settings()
			for _, a := range cfg.access() {
				if !strings.Contains(p.Description, string(a)) {
					t.Errorf("plan %s allows %s bindings; its description does not say so: %q", p.Name, a, p.Description)
				}
			}
			if cfg.Versioning != strings.Contains(p.Description, "every version") {
				t.Errorf("plan %s: versioning %v, description %q", p.Name, cfg.Versioning, p.Description)
			}
			async := strings.Contains(p.Description, "asynchronous only")
			if cfg.AsyncRequired != async {
				t.Errorf("plan %s: asyncRequired %v, description %q", p.Name, cfg.AsyncRequired, p.Description)
			}
			for _, op := range []string{"provisioning", "updates", "deprovisioning"} {
				if async && !strings.Contains(p.Description, op) {
					t.Errorf("plan %s requires asynchrony for %s; its description does not say so: %q", p.Name, op, p.Description)
				}
			}
		}
	}
}
