package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

const (
	testService  = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	testPlan     = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	testVersions = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b14"
	// labelSecret is a parameter value: the listings show parameters'
	// keys at most, never their values.
	labelSecret = "hunter2-label-value"
)

// listingsDataDir makes a data dir as a stopped serve leaves it: through
// the engine, i1 (with binding b1) and i2 (another plan, with a
// parameter), and through the store, as a broker mid-work leaves them,
// i3 in progress past its deadline, i4 in progress under a live lease,
// i6 in progress after its lease ran out, and i5 deprovisioned. It returns the dir and the secrets handed out.
func listingsDataDir(t *testing.T) (dir string, secrets []string) {
	t.Helper()
	ctx := t.Context()
	dir = t.TempDir()
	b, err := broker.Start(ctx, broker.Config{Listen: "127.0.0.1:0", Config: storage.Config{DataDir: dir, S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	e := b.Engine()
	if _, err := e.Provision(ctx, engine.ProvisionRequest{InstanceID: "i1", ServiceID: testService, PlanID: testPlan}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if _, err := e.Provision(ctx, engine.ProvisionRequest{InstanceID: "i2", ServiceID: testService, PlanID: testVersions,
		Parameters: json.RawMessage(`{"labels":{"owner":"` + labelSecret + `"}}`)}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	res, err := e.Bind(ctx, engine.BindRequest{InstanceID: "i1", BindingID: "b1", ServiceID: testService, PlanID: testPlan})
	if err != nil || res.Credentials == nil {
		t.Fatalf("bind: %v, %+v", err, res)
	}
	secrets = append(secrets, res.Credentials.SecretAccessKey, labelSecret)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	s, err := broker.OpenStore(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sealed, err := s.Get(ctx, engine.KindBinding, "b1")
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, base64.StdEncoding.EncodeToString(sealed.SealedSecret))
	now := time.Now().UTC()
	inProgress := func(id string, started time.Time) *engine.Record {
		return &engine.Record{Kind: engine.KindInstance, ID: id, Fingerprint: "fp", Backend: "bucket", Phase: engine.PhaseProvisioning,
			Request: engine.Request{ServiceID: testService, PlanID: testPlan},
			Op: engine.Operation{ID: "op-" + id, Type: engine.OpProvision, State: engine.OpInProgress, Description: "provision in progress",
				StartedAt: started, Deadline: started.Add(time.Hour)}, CreatedAt: started}
	}
	i3 := inProgress("i3", now.Add(-2*time.Hour))
	i4 := inProgress("i4", now.Add(-time.Minute))
	i4.Lease, i4.LeaseUntil = "replica-a", now.Add(time.Minute)
	// Its lease ran out 5 minutes ago: stuck after --stuck-after 1m, not
	// after the default 10m.
	i6 := inProgress("i6", now.Add(-30*time.Minute))
	i6.Lease, i6.LeaseUntil = "replica-b", now.Add(-5*time.Minute)
	i5 := inProgress("i5", now.Add(-time.Hour))
	i5.Phase, i5.Op.Type, i5.Op.State, i5.Op.EndedAt = engine.PhaseDeleted, engine.OpDeprovision, engine.OpSucceeded, now
	for _, r := range []*engine.Record{i3, i4, i5, i6} {
		if err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return dir, secrets
}

// firstColumn returns the first cell of each row of a table, header
// left out.
func firstColumn(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// TestAdminListings runs `admin instances`, `admin bindings`, `admin
// operations` and `admin show` on a data dir beside a store open for
// writing (as a running serve holds it): the rows each filter selects,
// the JSON's shape, and that no secret appears in any output.
func TestAdminListings(t *testing.T) {
	dir, secrets := listingsDataDir(t)
	// A writer on the file while the listings read it, as serve is.
	w, err := broker.OpenStore(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// outputs holds what each command printed, by command.
	outputs := map[string]string{}
	run := func(t *testing.T, args ...string) (string, string) {
		t.Helper()
		out, stderr, _, err := runAuditCmd(t, "", append(append([]string{"admin"}, args...), "--data-dir", dir)...)
		if err != nil {
			t.Fatalf("admin %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		outputs[strings.Join(args, " ")] = out + stderr
		return out, stderr
	}

	for name, tc := range map[string]struct {
		reason string
		args   []string
		want   []string
	}{
		"Instances":  {"every instance but the deleted one, in id order", []string{"instances"}, []string{"i1", "i2", "i3", "i4", "i6"}},
		"Deleted":    {"deleted instances only when asked for", []string{"instances", "--state", "deleted"}, []string{"i5"}},
		"States":     {"several phases", []string{"instances", "--state", "ready,deleted"}, []string{"i1", "i2", "i5"}},
		"Plan":       {"one plan", []string{"instances", "--plan", testVersions}, []string{"i2"}},
		"Service":    {"one service, every plan", []string{"instances", "--service", testService, "--state", "ready"}, []string{"i1", "i2"}},
		"Backend":    {"the bucket backend's", []string{"instances", "--backend", "bucket", "--state", "provisioning"}, []string{"i3", "i4", "i6"}},
		"OlderThan":  {"created more than an hour ago", []string{"instances", "--older-than", "1h"}, []string{"i3"}},
		"NewerThan":  {"created less than an hour ago", []string{"instances", "--newer-than", "1h", "--state", "provisioning"}, []string{"i4", "i6"}},
		"Stuck":      {"past its deadline; i4's lease is held, i6's ran out less than 10m ago", []string{"instances", "--stuck"}, []string{"i3"}},
		"StuckAfter": {"no lease held for longer than --stuck-after", []string{"instances", "--stuck", "--stuck-after", "1m", "--state", "deleted,provisioning"}, []string{"i3", "i6"}},
		"Limit":      {"the first page", []string{"instances", "--limit", "2"}, []string{"i1", "i2"}},
		"After":      {"the next page", []string{"instances", "--after", "i2"}, []string{"i3", "i4", "i6"}},
		"Bindings":   {"the bindings of one instance", []string{"bindings", "--instance", "i1"}, []string{"b1"}},
		"Operations": {"operations in progress, instances then bindings", []string{"operations"}, []string{"instance"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, _ := run(t, tc.args...)
			got := firstColumn(t, out)
			if tc.args[0] == "operations" {
				got = nil
				for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
					got = append(got, strings.Fields(l)[1])
				}
				tc.want = []string{"i3", "i4", "i6"}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: admin %s rows (-want +got):\n%s\n%s", tc.reason, strings.Join(tc.args, " "), diff, out)
			}
		})
	}

	t.Run("NoMatch", func(t *testing.T) {
		out, _ := run(t, "instances", "--backend", "elsewhere")
		if strings.TrimSpace(out) != "No instances match." {
			t.Errorf("a listing that selects nothing printed %q", out)
		}
		out, _ = run(t, "bindings", "-o", "json", "--state", "failed")
		if strings.TrimSpace(out) != "[]" {
			t.Errorf("an empty JSON listing printed %q, want []", out)
		}
	})

	t.Run("LimitSaysWhatFollows", func(t *testing.T) {
		_, stderr := run(t, "instances", "--limit", "2")
		if !strings.Contains(stderr, "--after i2") {
			t.Errorf("--limit 2 of 5: standard error %q, want the --after of the next page", stderr)
		}
		_, stderr = run(t, "instances", "--limit", "5")
		if stderr != "" {
			t.Errorf("--limit 5 of 5 said %q on standard error, want nothing", stderr)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		out, _ := run(t, "bindings", "-o", "json")
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("bindings -o json: %v, %d rows\n%s", err, len(rows), out)
		}
		b := rows[0]
		op, _ := b["operation"].(map[string]any)
		got := []any{b["kind"], b["id"], b["instanceId"], b["serviceId"], b["planId"], b["backend"], b["phase"], op["type"], op["state"]}
		want := []any{"binding", "b1", "i1", testService, testPlan, "bucket", "ready", "bind", "succeeded"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("bindings -o json fields (-want +got):\n%s", diff)
		}
		if r, _ := b["resource"].(string); !strings.HasPrefix(r, "bb-") {
			t.Errorf("bindings -o json: resource %q, want the binding's user", r)
		}
		out, _ = run(t, "operations", "--stuck", "-o", "json")
		var ops []row
		if err := json.Unmarshal([]byte(out), &ops); err != nil || len(ops) != 1 || ops[0].ID != "i3" || !strings.HasPrefix(ops[0].Stuck, "past its deadline") {
			t.Errorf("operations --stuck -o json: %v, want i3 past its deadline\n%s", err, out)
		}
	})

	t.Run("Wide", func(t *testing.T) {
		out, _ := run(t, "operations", "-o", "wide")
		lines := strings.Split(out, "\n")
		if !strings.Contains(lines[0], "RESOURCE") || !strings.Contains(lines[0], "STUCK") {
			t.Errorf("-o wide header lacks RESOURCE and STUCK: %q", lines[0])
		}
		if !strings.Contains(lines[1], "past its deadline") || !strings.Contains(lines[2], "replica-a until") {
			t.Errorf("-o wide rows lack i3's stuck reason or i4's lease:\n%s", out)
		}
	})

	t.Run("Show", func(t *testing.T) {
		// Runs of spaces as one: the alignment depends on the record.
		squash := func(s string) string { return regexp.MustCompile(` +`).ReplaceAllString(s, " ") }
		out, _ := run(t, "show", "i1")
		out = squash(out)
		for _, want := range []string{"Kind: instance", "Bucket created: yes", "Owner mark: bucketbroker:instance:", "Bindings: 1: b1",
			"Owner marks: not checked", "Operation: provision succeeded"} {
			if !strings.Contains(out, want) {
				t.Errorf("show i1 lacks %q:\n%s", want, out)
			}
		}
		out, _ = run(t, "show", "i2")
		if !strings.Contains(squash(out), "Parameters: labels (values not shown)") {
			t.Errorf("show i2 does not name the parameters' keys:\n%s", out)
		}
		out, _ = run(t, "show", "b1", "-o", "json")
		var sh shown
		if err := json.Unmarshal([]byte(out), &sh); err != nil {
			t.Fatal(err)
		}
		if sh.Kind != engine.KindBinding || !sh.SecretSealed || sh.Bucket == nil || sh.Bucket.AccessKeyID == "" || sh.Marks != nil {
			t.Errorf("show b1 -o json: %+v, want a binding with a sealed secret, its key id and no marks", sh)
		}
	})

	t.Run("ShowCheckMarks", func(t *testing.T) {
		// The embedded server on the data dir, as admin audit starts it
		// while serve is stopped (the writer above is only a store).
		out, _ := run(t, "show", "b1", "--check-marks", "-o", "json", "--s3-listen", "127.0.0.1:0", "--iam-listen", "127.0.0.1:0")
		var sh shown
		if err := json.Unmarshal([]byte(out), &sh); err != nil {
			t.Fatal(err)
		}
		if m := sh.Marks; m == nil || m.Resource != "user" || !m.Exists || !m.Ours || m.KeyHeld == nil || !*m.KeyHeld {
			t.Errorf("show b1 --check-marks: marks %+v, want its user with the record's mark and key", m)
		}
		out, _ = run(t, "show", "i1", "--check-marks", "--s3-listen", "127.0.0.1:0", "--iam-listen", "127.0.0.1:0")
		if !strings.Contains(out, "carries the record's mark") {
			t.Errorf("show i1 --check-marks:\n%s\nwant its bucket with the record's mark", out)
		}
	})

	for command, out := range outputs {
		for i, s := range secrets {
			if s != "" && strings.Contains(out, s) {
				t.Errorf("admin %s printed secret %d (not repeated here)", command, i)
			}
		}
	}
}

// TestAdminListingsRefuse: bad flags and a missing store are refused, and
// a listing creates no store where there is none.
func TestAdminListingsRefuse(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "nothing")
	for name, tc := range map[string]struct {
		reason string
		args   []string
		want   string
	}{
		"BadState":     {"a phase that does not exist", []string{"instances", "--state", "running"}, `--state "running"`},
		"BadOpState":   {"operations take operation states", []string{"operations", "--state", "ready"}, "in-progress, succeeded or failed"},
		"BadOutput":    {"an unknown format", []string{"bindings", "-o", "yaml"}, "--output"},
		"BadLimit":     {"a negative limit", []string{"instances", "--limit", "-1"}, "--limit"},
		"BadKind":      {"show takes instance or binding", []string{"show", "x", "--kind", "claim"}, "--kind"},
		"NoStore":      {"no store in the data dir: nothing to list, and none is created", []string{"instances"}, "no bucketbroker store here"},
		"ShowNoRecord": {"an id no record has", []string{"show", "nobody"}, "no bucketbroker store here"},
		"DSNPassword": {"a store that cannot be reached: the error names it without its password",
			[]string{"instances", "--store", "postgres://bucketbroker:pw-never-printed@127.0.0.1:1/bucketbroker?connect_timeout=2"}, "open postgres store"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, _, err := runAuditCmd(t, "", append(append([]string{"admin"}, tc.args...), "--data-dir", empty)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "pw-never-printed") {
				t.Errorf("%s\nerr = %v, want one containing %q (and no password)", tc.reason, err, tc.want)
			}
		})
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a refused listing created the data dir: stat: %v", err)
	}

	dir := t.TempDir()
	s, err := broker.OpenStore(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = runAuditCmd(t, "", "admin", "show", "nobody", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), `no instance or binding has the id "nobody"`) {
		t.Errorf("show of an unknown id: err = %v", err)
	}
}

// TestAdminListingsPostgres runs the listings on a PostgreSQL store with a
// writer open on it, as replicas of serve hold it.
func TestAdminListingsPostgres(t *testing.T) {
	dsn, empty := harness.PostgresSchema(t), harness.PostgresSchema(t)
	ctx := t.Context()
	w, err := broker.OpenStore(ctx, dsn, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now().UTC()
	sealed := []byte("sealed-secret-bytes-never-printed")
	recs := []*engine.Record{
		{Kind: engine.KindInstance, ID: "p1", Fingerprint: "fp", Backend: "bucket", Phase: engine.PhaseReady,
			Request: engine.Request{ServiceID: testService, PlanID: testPlan},
			Op:      engine.Operation{ID: "op1", Type: engine.OpProvision, State: engine.OpSucceeded, StartedAt: now, EndedAt: now}},
		{Kind: engine.KindInstance, ID: "p2", Fingerprint: "fp", Backend: "upstream-a", Phase: engine.PhaseProvisioning,
			Request: engine.Request{ServiceID: testService, PlanID: testPlan},
			Op: engine.Operation{ID: "op2", Type: engine.OpProvision, State: engine.OpInProgress,
				StartedAt: now.Add(-2 * time.Hour), Deadline: now.Add(-time.Hour)}},
		{Kind: engine.KindBinding, ID: "pb1", InstanceID: "p1", Fingerprint: "fp", Backend: "bucket", Phase: engine.PhaseReady,
			Request: engine.Request{ServiceID: testService, PlanID: testPlan}, SealedSecret: sealed,
			Op: engine.Operation{ID: "op3", Type: engine.OpBind, State: engine.OpSucceeded, StartedAt: now, EndedAt: now}},
	}
	for _, r := range recs {
		if err := w.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	var outputs []string
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"Instances": {[]string{"instances"}, []string{"p1", "p2"}},
		"Stuck":     {[]string{"instances", "--stuck", "--backend", "upstream-a"}, []string{"p2"}},
		"Bindings":  {[]string{"bindings", "--instance", "p1"}, []string{"pb1"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, stderr, _, err := runAuditCmd(t, "", append(append([]string{"admin"}, tc.args...), "--store", dsn)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			outputs = append(outputs, out)
			if diff := cmp.Diff(tc.want, firstColumn(t, out)); diff != "" {
				t.Errorf("admin %s rows (-want +got):\n%s", strings.Join(tc.args, " "), diff)
			}
		})
	}
	out, stderr, _, err := runAuditCmd(t, "", "admin", "show", "pb1", "-o", "json", "--store", dsn)
	if err != nil {
		t.Fatalf("show: %v\n%s", err, stderr)
	}
	outputs = append(outputs, out)
	var sh shown
	if err := json.Unmarshal([]byte(out), &sh); err != nil || !sh.SecretSealed || sh.InstanceID != "p1" {
		t.Errorf("show pb1 -o json: %v, %+v", err, sh)
	}
	for _, out := range outputs {
		if strings.Contains(out, string(sealed)) || strings.Contains(out, base64.StdEncoding.EncodeToString(sealed)) {
			t.Errorf("a listing printed the sealed secret (not repeated here)")
		}
	}

	// A schema without a store: refused, and left without tables.
	_, _, _, err = runAuditCmd(t, "", "admin", "operations", "--store", empty)
	if err == nil || !strings.Contains(err.Error(), "no bucketbroker store here") {
		t.Errorf("operations on an empty schema: err = %v, want a refusal", err)
	}
	e, err := broker.OpenStoreReadOnly(ctx, empty, "")
	if err == nil {
		e.Close()
		t.Errorf("the refused listing created a store in the empty schema")
	}
}
