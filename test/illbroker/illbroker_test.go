package illbroker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// The ill broker runs as its own process, started by test/harness, and is
// spoken to through internal/osbclient, as upstream mode will.

var binary string

func TestMain(m *testing.M) {
	harness.RunMain(m, nil, harness.Binary{Path: &binary, Build: harness.BuildIllBroker})
}

const identity = "kubernetes eyJ1c2VybmFtZSI6InQifQ=="

func start(t *testing.T, args ...string) (*harness.IllBroker, *osbclient.Client) {
	t.Helper()
	ib := harness.StartIllBroker(t, binary, args...)
	c, err := osbclient.New(osbclient.Config{URL: ib.URL(), Username: harness.IllUser, Password: harness.IllPass, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return ib, c
}

func provisionReq(plan string, async bool) osbclient.ProvisionRequest {
	r := osbclient.ProvisionRequest{ServiceID: illbroker.ServiceID, PlanID: plan, OrganizationGUID: "org", SpaceGUID: "space",
		Context: json.RawMessage(`{"platform":"kubernetes","namespace":"ns"}`), Parameters: json.RawMessage(`{"size":"small"}`)}
	r.AcceptsIncomplete, r.Identity = async, identity
	return r
}

var bindReq = func() osbclient.BindRequest {
	r := osbclient.BindRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync, AppGUID: "app"}
	r.Identity = identity
	return r
}()

var del = osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync, Call: osbclient.Call{Identity: identity}}

func wantError(t *testing.T, what string, err error, status int, code, descContains string) {
	t.Helper()
	if !osbclient.IsStatus(err, status) || !osbclient.IsCode(err, code) || !osbclient.Answered(err) {
		t.Fatalf("%s: got %v, want %d %q", what, err, status, code)
	}
	if e := asError(err); !strings.Contains(e.Description, descContains) {
		t.Fatalf("%s: description %q does not contain %q", what, e.Description, descContains)
	}
}

func asError(err error) *osbclient.Error {
	var e *osbclient.Error
	errors.As(err, &e)
	return e
}

// TestIdenticalCreateAsTheSpecAsks: with -duplicate-status 200 an
// identical create answers 200 (202 while the creation runs) and counts
// as identical; another create of the same id answers 409.
func TestIdenticalCreateAsTheSpecAsks(t *testing.T) {
	ib, c := start(t, "-duplicate-status", "200", "-async-delay", "1h")
	ctx := context.Background()
	for _, plan := range []string{illbroker.PlanSync, illbroker.PlanAsync} {
		id, async := "i-"+plan, plan == illbroker.PlanAsync
		first, err := c.Provision(ctx, id, provisionReq(plan, async))
		if err != nil {
			t.Fatalf("%s: provision: %v", plan, err)
		}
		again, err := c.Provision(ctx, id, provisionReq(plan, async))
		wantStatus := http.StatusOK
		if async {
			wantStatus = http.StatusAccepted
		}
		if err != nil || again.Status != wantStatus || again.Operation != first.Operation {
			t.Fatalf("%s: identical provision: %+v %v, want %d (operation %q)", plan, again, err, wantStatus, first.Operation)
		}
		other := provisionReq(plan, async)
		other.Parameters = json.RawMessage(`{"size":"large"}`)
		_, err = c.Provision(ctx, id, other)
		wantError(t, plan+": provision with other parameters", err, http.StatusConflict, "", "other attributes")
		if in := ib.State().Instances[id]; in.Creates != 1 || in.Identical != 1 {
			t.Errorf("%s: instance %+v, want 1 create and 1 identical", plan, in)
		}
	}
}

func TestDuplicatesAreRefused(t *testing.T) {
	for _, status := range []int{http.StatusConflict, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			ib, c := start(t, "-duplicate-status", fmt.Sprint(status))
			ctx := context.Background()
			r, err := c.Provision(ctx, "i-1", provisionReq(illbroker.PlanSync, false))
			if err != nil || r.Status != http.StatusCreated {
				t.Fatalf("provision: %+v %v", r, err)
			}
			// An identical create: the marketplace broker's "name taken".
			_, err = c.Provision(ctx, "i-1", provisionReq(illbroker.PlanSync, false))
			wantError(t, "duplicate provision", err, status, "", "is taken")

			first, err := c.Bind(ctx, "i-1", "b-1", bindReq)
			if err != nil || first.Status != http.StatusCreated || len(first.Credentials) == 0 {
				t.Fatalf("bind: %v", err)
			}
			_, err = c.Bind(ctx, "i-1", "b-1", bindReq)
			wantError(t, "duplicate bind", err, http.StatusInternalServerError, "", "name is taken")
			got, err := c.GetBinding(ctx, "i-1", "b-1", osbclient.PollRequest{})
			if err != nil || !jsonEqual(got.Credentials, first.Credentials) {
				t.Fatalf("get binding: %v, or other credentials", err)
			}

			_, err = c.Deprovision(ctx, "i-1", del)
			wantError(t, "deprovision with a binding", err, http.StatusBadRequest, "", "service keys")
			if _, err := c.Unbind(ctx, "i-1", "b-1", del); err != nil {
				t.Fatal(err)
			}
			_, err = c.Unbind(ctx, "i-1", "b-1", del)
			wantError(t, "second unbind", err, http.StatusGone, "", "")
			_, err = c.GetBinding(ctx, "i-1", "b-1", osbclient.PollRequest{})
			wantError(t, "get unbound binding", err, http.StatusNotFound, "", "")
			if d, err := c.Deprovision(ctx, "i-1", del); err != nil || d.Status != http.StatusOK {
				t.Fatalf("deprovision: %+v %v", d, err)
			}
			_, err = c.Deprovision(ctx, "i-1", del)
			wantError(t, "second deprovision", err, http.StatusGone, "", "")
			_, err = c.GetInstance(ctx, "i-1", osbclient.PollRequest{})
			wantError(t, "get deleted instance", err, http.StatusNotFound, "", "")

			st := ib.State()
			if in := st.Instances["i-1"]; in != nil {
				var body struct {
					Parameters json.RawMessage `json:"parameters"`
				}
				if err := json.Unmarshal(in.LastBody, &body); err != nil || string(body.Parameters) != `{"size":"small"}` {
					t.Errorf("last body %s: %v, want the provision's as sent", in.LastBody, err)
				}
				in.LastBody = nil
			}
			want := illbroker.State{
				Instances: map[string]*illbroker.InstanceStats{"i-1": {Creates: 1, Deletes: 1, PlanID: illbroker.PlanSync, Identity: identity,
					Parameters: json.RawMessage(`{"size":"small"}`), Context: json.RawMessage(`{"platform":"kubernetes","namespace":"ns"}`)}},
				Bindings: map[string]*illbroker.BindingStats{"b-1": {Creates: 1, Deletes: 1, CredentialsIssued: 1, InstanceID: "i-1", Identity: identity}},
				Failures: map[string]int{},
			}
			if diff := cmp.Diff(want, st); diff != "" {
				t.Fatalf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAsyncInProgress(t *testing.T) {
	// An operation that never ends within the test: what a broker answers
	// meanwhile.
	ib, c := start(t, "-async-delay", "1h")
	ctx := context.Background()
	_, err := c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, false))
	wantError(t, "async plan without accepts_incomplete", err, http.StatusUnprocessableEntity, osbclient.CodeAsyncRequired, "asynchronous")
	r, err := c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, true))
	if err != nil || !r.Async() || r.Operation == "" {
		t.Fatalf("async provision: %+v %v", r, err)
	}
	op, err := c.InstanceLastOperation(ctx, "i-1", osbclient.PollRequest{Operation: r.Operation})
	if err != nil || op.State != osbclient.StateInProgress {
		t.Fatalf("last_operation: %+v %v", op, err)
	}
	_, err = c.Bind(ctx, "i-1", "b-1", bindReq)
	wantError(t, "bind while provisioning", err, http.StatusUnprocessableEntity, osbclient.CodeConcurrencyError, "concurrent")
	_, err = c.Deprovision(ctx, "i-1", osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync, Call: osbclient.Call{AcceptsIncomplete: true}})
	wantError(t, "deprovision while provisioning", err, http.StatusUnprocessableEntity, osbclient.CodeConcurrencyError, "")
	_, err = c.GetInstance(ctx, "i-1", osbclient.PollRequest{})
	wantError(t, "get while provisioning", err, http.StatusNotFound, "", "")
	// Not even a duplicate of the running create is answered right.
	_, err = c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, true))
	if !osbclient.IsStatus(err, http.StatusConflict) && !osbclient.IsStatus(err, http.StatusInternalServerError) {
		t.Fatalf("duplicate async provision: %v, want 409 or 500", err)
	}
	if st := ib.State().Instances["i-1"]; st.Creates != 1 || st.State != "provisioning" {
		t.Fatalf("state: %+v", st)
	}
}

func waitOp(t *testing.T, poll func() (*osbclient.LastOperation, error)) (*osbclient.LastOperation, error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		op, err := poll()
		if err != nil || op.State != osbclient.StateInProgress {
			return op, err
		}
	}
	t.Fatal("operation still in progress after a minute")
	return nil, nil
}

func TestAsyncEnds(t *testing.T) {
	ctx := context.Background()
	t.Run("succeeded, then deprovisioned", func(t *testing.T) {
		ib, c := start(t, "-async-delay", "200ms")
		r, err := c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, true))
		if err != nil || !r.Async() {
			t.Fatalf("provision: %+v %v", r, err)
		}
		op, err := waitOp(t, func() (*osbclient.LastOperation, error) {
			return c.InstanceLastOperation(ctx, "i-1", osbclient.PollRequest{Operation: r.Operation})
		})
		if err != nil || op.State != osbclient.StateSucceeded {
			t.Fatalf("provision ended %+v %v", op, err)
		}
		if _, err := c.GetInstance(ctx, "i-1", osbclient.PollRequest{}); err != nil {
			t.Fatal(err)
		}
		d, err := c.Deprovision(ctx, "i-1", osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync, Call: osbclient.Call{AcceptsIncomplete: true}})
		if err != nil || !d.Async() {
			t.Fatalf("deprovision: %+v %v", d, err)
		}
		// The spec's end of a deprovision: 410 Gone.
		_, err = waitOp(t, func() (*osbclient.LastOperation, error) {
			return c.InstanceLastOperation(ctx, "i-1", osbclient.PollRequest{Operation: d.Operation})
		})
		wantError(t, "last_operation after the deprovision", err, http.StatusGone, "", "")
		if st := ib.State().Instances["i-1"]; st.Creates != 1 || st.Deletes != 1 || st.Exists {
			t.Fatalf("state: %+v", st)
		}
	})
	t.Run("failed after creating", func(t *testing.T) {
		ib, c := start(t, "-async-delay", "200ms", "-failed-op-rate", "1")
		r, err := c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, true))
		if err != nil || !r.Async() {
			t.Fatalf("provision: %+v %v", r, err)
		}
		op, err := waitOp(t, func() (*osbclient.LastOperation, error) {
			return c.InstanceLastOperation(ctx, "i-1", osbclient.PollRequest{Operation: r.Operation})
		})
		if err != nil || op.State != osbclient.StateFailed || op.Description == "" {
			t.Fatalf("provision ended %+v %v, want failed with a description", op, err)
		}
		// It exists all the same: a retry meets "name taken".
		if st := ib.State().Instances["i-1"]; st.Creates != 1 || !st.Exists || st.State != "failed" {
			t.Fatalf("state: %+v", st)
		}
		_, err = c.Provision(ctx, "i-1", provisionReq(illbroker.PlanAsync, true))
		if !osbclient.IsStatus(err, http.StatusConflict) && !osbclient.IsStatus(err, http.StatusInternalServerError) {
			t.Fatalf("retried provision: %v, want 409 or 500", err)
		}
	})
}

// outcome is what a client saw of one request: "ok", the status of an
// error answer, or "no answer".
func outcome(err error) string {
	switch e := asError(err); {
	case err == nil:
		return "ok"
	case e != nil:
		return fmt.Sprint(e.Status)
	default:
		return "no answer"
	}
}

// provisionMany sends n sync provisions of distinct ids, one after the
// other, and returns what the client saw of each.
func provisionMany(t *testing.T, c *osbclient.Client, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		_, err := c.Provision(context.Background(), fmt.Sprintf("i-%d", i), provisionReq(illbroker.PlanSync, false))
		out = append(out, outcome(err))
	}
	return out
}

func TestTransientFailures(t *testing.T) {
	const n = 60
	ib1, c1 := start(t, "-seed", "7", "-fail-rate", "0.5")
	_, c2 := start(t, "-seed", "7", "-fail-rate", "0.5")
	_, c3 := start(t, "-seed", "8", "-fail-rate", "0.5")
	got1, got2, got3 := provisionMany(t, c1, n), provisionMany(t, c2, n), provisionMany(t, c3, n)
	if diff := cmp.Diff(got1, got2); diff != "" {
		t.Fatalf("the same seed gave other failures (-first +second):\n%s", diff)
	}
	if cmp.Equal(got1, got3) {
		t.Fatalf("seeds 7 and 8 gave the same %d outcomes", n)
	}
	st := ib1.State()
	seen := map[string]int{}
	for i, o := range got1 {
		seen[o]++
		created := st.Instances[fmt.Sprintf("i-%d", i)]
		// 503 comes before the work; 500 and a dropped connection after it.
		wantCreated := o != "503"
		if (created != nil && created.Creates == 1) != wantCreated {
			t.Fatalf("request %d: client saw %s, broker state %+v", i, o, created)
		}
	}
	for _, o := range []string{"ok", "503", "500", "no answer"} {
		if seen[o] == 0 {
			t.Fatalf("no %q among %d outcomes: %v", o, n, seen)
		}
	}
	if st.Failures["503-before"] != seen["503"] || st.Failures["500-after"] != seen["500"] || st.Failures["drop-after"] != seen["no answer"] {
		t.Fatalf("failures counted %v, client saw %v", st.Failures, seen)
	}
}

func TestForgetfulLastOperationAndLostFirstAnswers(t *testing.T) {
	ib, c := start(t, "-forgetful-last-operation", "-lose-first-answer")
	ctx := context.Background()
	// The first create is done, its answer lost; the second meets it.
	if _, err := c.Provision(ctx, "i1", provisionReq(illbroker.PlanSync, false)); err == nil || osbclient.Answered(err) {
		t.Fatalf("first provision: %v, want no answer", err)
	}
	if _, err := c.Provision(ctx, "i1", provisionReq(illbroker.PlanSync, false)); !osbclient.Answered(err) {
		t.Fatalf("second provision: %v, want the duplicate's answer", err)
	}
	// last_operation without an operation: failed, for a live instance and
	// for an unknown one alike; GET still finds the live one.
	for _, id := range []string{"i1", "nobody"} {
		lo, err := c.InstanceLastOperation(ctx, id, osbclient.PollRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync})
		if err != nil || lo.State != osbclient.StateFailed || lo.Description != illbroker.NotFoundDescription {
			t.Fatalf("last_operation of %s: %+v, %v; want failed, %q", id, lo, err, illbroker.NotFoundDescription)
		}
	}
	if _, err := c.GetInstance(ctx, "i1", osbclient.PollRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatalf("GET of the live instance: %v", err)
	}
	if _, err := c.Bind(ctx, "i1", "b1", bindReq); err == nil || osbclient.Answered(err) {
		t.Fatalf("first bind: %v, want no answer", err)
	}
	st := ib.State()
	if in, b := st.Instances["i1"], st.Bindings["b1"]; !in.Exists || in.Creates != 1 || !b.Exists || b.Creates != 1 || st.Failures["first-answer-lost"] != 2 {
		t.Fatalf("state: instance %+v, binding %+v, failures %v; want each made once, two answers lost", in, b, st.Failures)
	}
}

func TestAuth(t *testing.T) {
	ib, _ := start(t)
	c, err := osbclient.New(osbclient.Config{URL: ib.URL(), Username: harness.IllUser, Password: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Catalog(context.Background())
	wantError(t, "wrong password", err, http.StatusUnauthorized, "", "")
}

func TestCatalog(t *testing.T) {
	_, c := start(t)
	cat, err := c.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Services) != 1 || cat.Services[0].ID != illbroker.ServiceID || len(cat.Services[0].Plans) != 2 ||
		!cat.Services[0].InstancesRetrievable || !cat.Services[0].BindingsRetrievable {
		t.Fatalf("catalog: %+v", cat)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-fail-rate", "1.5"},
		{"-failed-op-rate", "-0.1"},
		{"-duplicate-status", "418"},
		{"-async-delay", "-1s"},
	} {
		cmd := exec.Command(binary, append([]string{"-listen", "127.0.0.1:0"}, args...)...)
		cmd.Env = append(os.Environ(), "ILLBROKER_USERNAME=u", "ILLBROKER_PASSWORD=p")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "illbroker: ") {
			t.Fatalf("%v: %v %s, want exit status 1 with a message", args, err, out)
		}
	}
	cmd := exec.Command(binary, "-listen", "127.0.0.1:0")
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "ILLBROKER_PASSWORD") {
		t.Fatalf("without credentials: %v %s", err, out)
	}
}
