package osbclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// These tests run the client against bucketbroker's own door: the real
// binary, started by test/harness on the embedded S3 + IAM server.

const planAsync = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b13" // standard-async

var binary string

func TestMain(m *testing.M) {
	harness.RunMain(m, nil, harness.Binary{Path: &binary, Build: harness.Build})
}

func newClient(t *testing.T, url, pass string) *osbclient.Client {
	t.Helper()
	c, err := osbclient.New(osbclient.Config{URL: url, Username: harness.User, Password: pass, Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantStatus(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	if !osbclient.IsStatus(err, status) || !osbclient.IsCode(err, code) {
		t.Fatalf("%s: got %v, want upstream answer %d %q", what, err, status, code)
	}
	if !osbclient.Answered(err) {
		t.Fatalf("%s: Answered is false for %v", what, err)
	}
}

// waitOp polls until the operation is no longer in progress. The deadline
// only stops a hung test; nothing asserts how long it took.
func waitOp(t *testing.T, poll func() (*osbclient.LastOperation, error)) *osbclient.LastOperation {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		op, err := poll()
		if err != nil {
			t.Fatalf("last_operation: %v", err)
		}
		if op.State != osbclient.StateInProgress {
			return op
		}
	}
	t.Fatal("operation still in progress after 2 minutes")
	return nil
}

func TestAgainstBucketbroker(t *testing.T) {
	b := harness.New(t, binary)
	b.Start()
	ctx := context.Background()
	c := newClient(t, b.URL(), harness.Pass)
	identity := "kubernetes eyJ1c2VybmFtZSI6InQifQ=="

	cat, err := c.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var svc *osbclient.Service
	for i := range cat.Services {
		if cat.Services[i].ID == harness.ServiceID {
			svc = &cat.Services[i]
		}
	}
	if svc == nil || len(svc.Plans) == 0 || !svc.Bindable || !svc.InstancesRetrievable || !svc.BindingsRetrievable {
		t.Fatalf("catalog: service %s missing or incomplete: %+v", harness.ServiceID, cat)
	}
	var raw map[string]any
	if err := json.Unmarshal(svc.Raw, &raw); err != nil || raw["id"] != harness.ServiceID || raw["description"] == nil {
		t.Fatalf("catalog: Raw is not the service object as sent: %v %s", err, svc.Raw)
	}

	prov := osbclient.ProvisionRequest{ServiceID: harness.ServiceID, PlanID: harness.PlanStd,
		OrganizationGUID: "org", SpaceGUID: "space", Context: json.RawMessage(`{"platform":"kubernetes","namespace":"ns"}`),
		Parameters: json.RawMessage(`{}`)}
	prov.Identity = identity

	t.Run("sync provision, duplicate, conflict", func(t *testing.T) {
		r, err := c.Provision(ctx, "sync-1", prov)
		if err != nil || r.Status != http.StatusCreated || r.Async() {
			t.Fatalf("provision: %+v %v, want 201", r, err)
		}
		r, err = c.Provision(ctx, "sync-1", prov)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("duplicate provision: %+v %v, want 200", r, err)
		}
		other := prov
		other.PlanID = harness.PlanVersioned
		_, err = c.Provision(ctx, "sync-1", other)
		wantStatus(t, "conflicting provision", err, http.StatusConflict, "")
		in, err := c.GetInstance(ctx, "sync-1", osbclient.PollRequest{})
		if err != nil || in.ServiceID != harness.ServiceID || in.PlanID != harness.PlanStd {
			t.Fatalf("get instance: %+v %v", in, err)
		}
		_, err = c.GetInstance(ctx, "no-such-instance", osbclient.PollRequest{})
		wantStatus(t, "get unknown instance", err, http.StatusNotFound, "")
	})

	t.Run("async provision and deprovision", func(t *testing.T) {
		req := prov
		req.PlanID = planAsync
		_, err := c.Provision(ctx, "async-1", req)
		wantStatus(t, "async-only plan without accepts_incomplete", err, http.StatusUnprocessableEntity, osbclient.CodeAsyncRequired)
		var e *osbclient.Error
		if !errors.As(err, &e) || e.Description != "This service plan requires client support for asynchronous service operations." {
			t.Fatalf("AsyncRequired description: %v", err)
		}
		req.AcceptsIncomplete = true
		r, err := c.Provision(ctx, "async-1", req)
		if err != nil || !r.Async() || r.Operation == "" {
			t.Fatalf("async provision: %+v %v, want 202 with an operation", r, err)
		}
		again, err := c.Provision(ctx, "async-1", req)
		if err != nil || !again.Async() || again.Operation != r.Operation {
			// The first may have finished meanwhile: then 200.
			if err != nil || again.Status != http.StatusOK {
				t.Fatalf("duplicate async provision: %+v %v, want 202 %q or 200", again, err, r.Operation)
			}
		}
		poll := osbclient.PollRequest{ServiceID: harness.ServiceID, PlanID: planAsync, Operation: r.Operation}
		op := waitOp(t, func() (*osbclient.LastOperation, error) { return c.InstanceLastOperation(ctx, "async-1", poll) })
		if op.State != osbclient.StateSucceeded {
			t.Fatalf("provision ended %+v", op)
		}

		del := osbclient.DeleteRequest{ServiceID: harness.ServiceID, PlanID: planAsync}
		_, err = c.Deprovision(ctx, "async-1", del)
		wantStatus(t, "async-only deprovision without accepts_incomplete", err, http.StatusUnprocessableEntity, osbclient.CodeAsyncRequired)
		del.AcceptsIncomplete = true
		d, err := c.Deprovision(ctx, "async-1", del)
		if err != nil || !d.Async() || d.Operation == "" {
			t.Fatalf("async deprovision: %+v %v", d, err)
		}
		poll.Operation = d.Operation
		op = waitOp(t, func() (*osbclient.LastOperation, error) { return c.InstanceLastOperation(ctx, "async-1", poll) })
		if op.State != osbclient.StateSucceeded {
			t.Fatalf("deprovision ended %+v", op)
		}
		_, err = c.Deprovision(ctx, "async-1", del)
		wantStatus(t, "second deprovision", err, http.StatusGone, "")
	})

	t.Run("bind, duplicate, unbind", func(t *testing.T) {
		if _, err := c.Provision(ctx, "bind-1", prov); err != nil {
			t.Fatal(err)
		}
		br := osbclient.BindRequest{ServiceID: harness.ServiceID, PlanID: harness.PlanStd, AppGUID: "app",
			Context: json.RawMessage(`{"platform":"kubernetes"}`)}
		br.Identity = identity
		first, err := c.Bind(ctx, "bind-1", "b-1", br)
		if err != nil || first.Status != http.StatusCreated || len(first.Credentials) == 0 {
			t.Fatalf("bind: status %d, credentials %d bytes, %v; want 201 with credentials", statusOf(first), lenCreds(first), err)
		}
		dup, err := c.Bind(ctx, "bind-1", "b-1", br)
		if err != nil || dup.Status != http.StatusOK {
			t.Fatalf("duplicate bind: status %d, %v; want 200", statusOf(dup), err)
		}
		if diff := cmp.Diff(creds(t, first), creds(t, dup)); diff != "" {
			t.Fatal("duplicate bind answered other credentials") // no diff: it holds secrets
		}
		other := br
		other.AppGUID = "other-app"
		_, err = c.Bind(ctx, "bind-1", "b-1", other)
		wantStatus(t, "conflicting bind", err, http.StatusConflict, "")
		got, err := c.GetBinding(ctx, "bind-1", "b-1", osbclient.PollRequest{})
		if err != nil || cmp.Diff(creds(t, first), creds(t, got)) != "" {
			t.Fatalf("get binding: %v, or other credentials", err)
		}
		_, err = c.GetBinding(ctx, "bind-1", "no-such-binding", osbclient.PollRequest{})
		wantStatus(t, "get unknown binding", err, http.StatusNotFound, "")

		// Asynchronous bind: 202 with the budget at 0, then poll.
		br.AcceptsIncomplete = true
		ab, err := c.Bind(ctx, "bind-1", "b-2", br)
		if err != nil || !ab.Async() || ab.Operation == "" {
			t.Fatalf("async bind: status %d, %v; want 202 with an operation", statusOf(ab), err)
		}
		poll := osbclient.PollRequest{ServiceID: harness.ServiceID, PlanID: harness.PlanStd, Operation: ab.Operation}
		op := waitOp(t, func() (*osbclient.LastOperation, error) { return c.BindingLastOperation(ctx, "bind-1", "b-2", poll) })
		if op.State != osbclient.StateSucceeded {
			t.Fatalf("async bind ended %+v", op)
		}
		if got, err := c.GetBinding(ctx, "bind-1", "b-2", osbclient.PollRequest{}); err != nil || len(got.Credentials) == 0 {
			t.Fatalf("get async binding: %v", err)
		}

		del := osbclient.DeleteRequest{ServiceID: harness.ServiceID, PlanID: harness.PlanStd}
		del.Identity = identity
		for _, id := range []string{"b-1", "b-2"} {
			if u, err := c.Unbind(ctx, "bind-1", id, del); err != nil || u.Status != http.StatusOK {
				t.Fatalf("unbind %s: %+v %v", id, u, err)
			}
			_, err = c.Unbind(ctx, "bind-1", id, del)
			wantStatus(t, "second unbind", err, http.StatusGone, "")
		}
		if d, err := c.Deprovision(ctx, "bind-1", del); err != nil || d.Status != http.StatusOK {
			t.Fatalf("deprovision: %+v %v", d, err)
		}
		_, err = c.Deprovision(ctx, "never-was", del)
		wantStatus(t, "deprovision of an unknown id", err, http.StatusGone, "")
	})

	t.Run("wrong password", func(t *testing.T) {
		_, err := newClient(t, b.URL(), "wrong").Catalog(ctx)
		wantStatus(t, "catalog with a wrong password", err, http.StatusUnauthorized, "")
	})
}

func TestTLSAgainstBucketbroker(t *testing.T) {
	ca := harness.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	certPEM, keyPEM := ca.Issue(2)
	harness.WriteFiles(t, certFile, keyFile, certPEM, keyPEM)
	b := harness.New(t, binary)
	b.Args = []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}
	b.CA = ca.Pool
	b.Start()
	// The CA file: the serving certificate's issuer. A leaf is not a CA,
	// so trusting the leaf alone must fail; trusting the CA must work.
	if err := os.WriteFile(caFile, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongCA := filepath.Join(dir, "wrong.crt")
	if err := os.WriteFile(wrongCA, harness.NewCA(t).PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tls    osbclient.TLSOptions
		wantOK bool
	}{
		{"our CA", osbclient.TLSOptions{CAFile: caFile}, true},
		{"another CA", osbclient.TLSOptions{CAFile: wrongCA}, false},
		{"system roots", osbclient.TLSOptions{}, false},
		{"insecure", osbclient.TLSOptions{InsecureSkipVerify: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := osbclient.New(osbclient.Config{URL: b.URL(), Username: harness.User, Password: harness.Pass, TLS: tc.tls})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Catalog(context.Background())
			if (err == nil) != tc.wantOK {
				t.Fatalf("catalog over TLS: %v, want ok=%v", err, tc.wantOK)
			}
			if err != nil && osbclient.Answered(err) {
				t.Fatalf("a TLS failure is no upstream answer: %v", err)
			}
		})
	}
}

func statusOf(b *osbclient.Binding) int {
	if b == nil {
		return 0
	}
	return b.Status
}

func lenCreds(b *osbclient.Binding) int {
	if b == nil {
		return 0
	}
	return len(b.Credentials)
}

func creds(t *testing.T, b *osbclient.Binding) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b.Credentials, &m); err != nil || len(m) == 0 {
		t.Fatalf("credentials are no JSON object (%d bytes)", len(b.Credentials))
	}
	return m
}
