package catalog

import (
	"encoding/json"
	"strings"
	"testing"
)

const upstreamService = `{"id":"u-svc","name":"db","description":"A database","bindable":true,
	"instances_retrievable":true,"x-vendor":{"tier":"gold"},
	"plans":[{"id":"u-plan","name":"small","description":"Small","maximum_polling_duration":60}]}`

func TestMergeServesUpstreamServicesVerbatim(t *testing.T) {
	c, err := Merge(Default(), Source{Upstream: "db", Services: []json.RawMessage{json.RawMessage(upstreamService)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup("u-svc", "u-plan"); err != nil {
		t.Fatalf("lookup of the upstream's plan: %v", err)
	}
	if _, err := c.Lookup(svc, standard); err != nil {
		t.Fatalf("lookup of the bucket plan: %v", err)
	}
	if !c.HasService("u-svc") || c.Services[len(c.Services)-1].Upstream != "db" {
		t.Fatal("the upstream's service is not marked as the upstream's")
	}
	js, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services []map[string]json.RawMessage `json:"services"`
	}
	if err := json.Unmarshal(js, &doc); err != nil || len(doc.Services) != len(Default().Services)+1 {
		t.Fatalf("served catalog: %v, %d services", err, len(doc.Services))
	}
	last := doc.Services[len(doc.Services)-1]
	if string(last["x-vendor"]) != `{"tier":"gold"}` || !strings.Contains(string(last["plans"]), "maximum_polling_duration") {
		t.Errorf("the upstream's fields were not served as it gave them: %s", js)
	}
	if strings.Contains(string(js), "asyncRequired") {
		t.Errorf("the bucket plans' own configuration is served: %s", js)
	}
	for _, w := range c.Warnings() {
		if strings.Contains(w, `"db"`) {
			t.Errorf("a warning about the upstream's schemas: %s", w)
		}
	}
}

func TestMergeRefusesCollisionsNamingBothSides(t *testing.T) {
	bucketPlan := strings.Replace(upstreamService, `"u-plan"`, `"`+standard+`"`, 1)
	for name, tc := range map[string]struct {
		base    *Catalog
		sources []Source
		want    []string
	}{
		"service id of two upstreams": {sources: []Source{
			{Upstream: "a", Services: []json.RawMessage{json.RawMessage(upstreamService)}},
			{Upstream: "b", Services: []json.RawMessage{json.RawMessage(upstreamService)}}},
			want: []string{`"u-svc"`, `upstream "a"`, `upstream "b"`}},
		"plan id of the bucket catalog": {base: Default(), sources: []Source{
			{Upstream: "a", Services: []json.RawMessage{json.RawMessage(bucketPlan)}}},
			want: []string{standard, "the bucket catalog", `upstream "a"`}},
		"bucketbroker configuration in an upstream plan": {sources: []Source{
			{Upstream: "a", Services: []json.RawMessage{json.RawMessage(strings.Replace(upstreamService, `"maximum_polling_duration":60`, `"bucketbroker":{}`, 1))}}},
			want: []string{`"bucketbroker"`, `upstream "a"`}},
		"no service at all": {want: []string{"no services"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Merge(tc.base, tc.sources...)
			if err == nil {
				t.Fatal("merged")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}
}
