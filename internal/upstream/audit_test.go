package upstream_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

func TestAuditComparesRecordsWithTheUpstream(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	for _, id := range []string{"i-ok", "i-gone", "i-plan"} {
		if _, err := e.eng.Provision(ctx, provision(id, illbroker.PlanSync, false, "")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"b-ok", "b-gone"} {
		if _, err := e.eng.Bind(ctx, bind("i-ok", id)); err != nil {
			t.Fatal(err)
		}
	}
	opts := audit.Options{Store: e.st, Upstreams: []audit.Upstream{e.up}, Prefix: "bb"}
	rep, err := audit.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || len(rep.Skipped) != 0 {
		t.Fatalf("audit of records that match the upstream: findings %+v, skipped %+v", rep.Findings, rep.Skipped)
	}

	// Behind bucketbroker's back: an instance and a binding deleted, a
	// plan changed.
	del := osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}
	if _, err := e.direct.Deprovision(ctx, "i-gone", del); err != nil {
		t.Fatal(err)
	}
	if _, err := e.direct.Unbind(ctx, "i-ok", "b-gone", del); err != nil {
		t.Fatal(err)
	}
	if _, err := e.direct.Update(ctx, "i-plan", osbclient.UpdateRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync}); err != nil {
		t.Fatal(err)
	}
	before := e.ib.State()
	rep, err = audit.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	type finding struct{ Kind, Resource, Name, Record string }
	var got []finding
	for _, f := range rep.Findings {
		got = append(got, finding{string(f.Kind), f.Resource, f.Name, f.Record})
		if !strings.HasPrefix(f.Action, "not fixed") {
			t.Errorf("finding %s %s: action %q, want report only", f.Kind, f.Name, f.Action)
		}
	}
	want := []finding{
		{"differs", audit.ResourceUpstreamInstance, "ill:i-plan", "instance/i-plan"},
		{"missing", audit.ResourceUpstreamBinding, "ill:b-gone", "binding/b-gone"},
		{"missing", audit.ResourceUpstreamInstance, "ill:i-gone", "instance/i-gone"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("findings (-want +got):\n%s", diff)
	}
	if !rep.Drift() {
		t.Error("no drift reported")
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "1 differing upstream") {
		t.Errorf("text report: %v\n%s", err, text.String())
	}
	// --fix acts on none of them, and nothing reaches the upstream.
	if err := audit.Fix(ctx, opts, rep); err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Fixed {
			t.Errorf("Fix fixed upstream finding %+v", f)
		}
	}
	if diff := cmp.Diff(before, e.ib.State()); diff != "" {
		t.Errorf("the upstream changed during the audit and --fix (-before +after):\n%s", diff)
	}
	// Credentials fetched by the binding's GET are not in the report.
	b, err := e.eng.GetBinding(ctx, "i-ok", "b-ok")
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		Password string `json:"password"`
	}
	_ = json.Unmarshal(b.RawCredentials, &creds)
	out, _ := json.Marshal(rep)
	if creds.Password == "" || strings.Contains(string(out)+text.String(), creds.Password) {
		t.Error("the report holds a binding's password (or the binding has none)")
	}
}

func TestAuditSaysWhatCannotBeChecked(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-not-retrievable"}})
	ctx := context.Background()
	if _, err := e.eng.Provision(ctx, provision("i-n", illbroker.PlanSync, false, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Bind(ctx, bind("i-n", "b-n")); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(ctx, audit.Options{Store: e.st, Upstreams: []audit.Upstream{e.up}, Prefix: "bb"})
	if err != nil {
		t.Fatal(err)
	}
	reasons := ""
	for _, s := range rep.Skipped {
		reasons += s.Record + ": " + s.Reason + "\n"
	}
	if len(rep.Findings) != 0 || len(rep.Skipped) != 2 || strings.Count(reasons, "cannot be checked") != 2 ||
		!strings.Contains(reasons, "instance/i-n: upstream \"ill\"'s catalog does not say instances_retrievable") ||
		!strings.Contains(reasons, "binding/b-n: upstream \"ill\"'s catalog does not say bindings_retrievable") {
		t.Fatalf("audit of a non-retrievable upstream: findings %+v, skipped %+v; want both records not judged, saying why", rep.Findings, rep.Skipped)
	}
	// An audit not given the upstream says so for each record.
	if _, err := audit.Run(ctx, audit.Options{Store: e.st, Prefix: "bb"}); err == nil {
		t.Error("an audit with neither a driver nor an upstream ran")
	}
	rep, err = audit.Run(ctx, audit.Options{Store: e.st, Upstreams: []audit.Upstream{otherUpstream{}}, Prefix: "bb"})
	if err != nil || len(rep.Skipped) != 2 || !strings.Contains(rep.Skipped[0].Reason, `upstream "ill"`) || !strings.Contains(rep.Skipped[0].Reason, "--upstream") {
		t.Fatalf("audit without the records' upstream: %+v, %v", rep, err)
	}
}

// otherUpstream is an upstream no record names.
type otherUpstream struct{}

func (otherUpstream) Name() string { return "other" }
func (otherUpstream) Observe(context.Context, *engine.Record) (audit.Observation, error) {
	panic("observed a record of another upstream")
}
