package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

func TestUpdateIsForwardedAndRefusalsReachThePlatform(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	if _, err := e.eng.Provision(ctx, provision("i-u", illbroker.PlanSync, false, `{"size":"small"}`)); err != nil {
		t.Fatal(err)
	}
	res, err := e.eng.Update(ctx, engine.UpdateRequest{InstanceID: "i-u", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync,
		Parameters: json.RawMessage(`{"size":"large"}`), Identity: identity})
	if err != nil || res.Outcome != engine.OutcomeOK {
		t.Fatalf("update: %+v, %v", res, err)
	}
	if in := e.ib.State().Instances["i-u"]; in.PlanID != illbroker.PlanAsync || string(in.Parameters) != `{"size":"large"}` || in.Identity != identity {
		t.Fatalf("upstream after the update: %+v", in)
	}
	// The instance vanishes upstream behind bucketbroker's back: the
	// upstream's 404 to the next update is a refusal, answered 422 with
	// its description, and not retried.
	if _, err := e.direct.Deprovision(ctx, "i-u", osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync}); err != nil {
		t.Fatal(err)
	}
	_, err = e.eng.Update(ctx, engine.UpdateRequest{InstanceID: "i-u", ServiceID: illbroker.ServiceID, Parameters: json.RawMessage(`{"size":"tiny"}`)})
	if !errors.Is(err, engine.ErrUnprocessable) || !strings.Contains(err.Error(), "no such instance") {
		t.Fatalf("update refused upstream: %v, want 422 with the upstream's description", err)
	}
	if strings.Contains(e.log.String(), "Backend call failed; retrying") {
		t.Error("a refusal was retried")
	}
	e.noErrorLines()
}

func TestDeprovisionDuringAnAsyncProvision(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-async-delay", "500ms"}})
	ctx := context.Background()
	res, err := e.eng.Provision(ctx, provision("i-r", illbroker.PlanAsync, true, ""))
	if err != nil || res.Outcome != engine.OutcomeAccepted {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	for e.ib.State().Instances["i-r"] == nil { // the upstream has begun
		time.Sleep(10 * time.Millisecond)
	}
	dep, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "i-r", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync, AcceptsIncomplete: true})
	if err != nil {
		t.Fatalf("deprovision racing the provision: %v", err)
	}
	if lo := e.waitOp(engine.KindInstance, "", "i-r", dep.Operation); lo.State != engine.OpSucceeded {
		t.Fatalf("deprovision ended %+v", lo)
	}
	if in := e.ib.State().Instances["i-r"]; in.Exists || in.Creates != 1 || in.Deletes != 1 {
		t.Fatalf("upstream: %+v, want created once and deleted once", in)
	}
	e.noErrorLines()
}

func TestOrphanMitigationAfterACreateWithoutAnswer(t *testing.T) {
	// Every answer but a DELETE's is lost: the create runs out of time
	// without a definite answer, and what it may have made is deleted.
	lose := func(r *http.Request) bool { return r.Method != http.MethodDelete && r.URL.Path != "/v2/catalog" }
	e := newEnv(t, envOpts{syncTimeout: 3 * time.Second, via: func(u *url.URL) string { return lossy(t, u, lose) }})
	_, err := e.eng.Provision(context.Background(), provision("i-o", illbroker.PlanSync, false, ""))
	if !errors.Is(err, engine.ErrFailed) {
		t.Fatalf("provision without answers: %v, want a failure", err)
	}
	if in := e.ib.State().Instances["i-o"]; in == nil || in.Creates != 1 || in.Deletes != 1 || in.Exists {
		t.Fatalf("upstream: %+v, want the instance made by the lost create deleted", in)
	}
	if !strings.Contains(e.log.String(), "Orphan mitigation: deleted") {
		t.Error("orphan mitigation not logged")
	}
}

func TestFailureAtTheDeadlineNamesTheUpstream(t *testing.T) {
	// The upstream goes away after the catalog: the synchronous provision
	// retries until its deadline, and its failure reads as the platform
	// should read it; the log keeps the transport error.
	e := newEnv(t, envOpts{syncTimeout: 2 * time.Second})
	e.ib.Stop()
	ctx := context.Background()
	if _, err := e.eng.Provision(ctx, provision("i-d", illbroker.PlanSync, false, "")); !errors.Is(err, engine.ErrFailed) {
		t.Fatalf("provision with the upstream down: %v, want a failure", err)
	}
	lo := e.waitOp(engine.KindInstance, "", "i-d", "")
	if lo.State != engine.OpFailed || !strings.Contains(lo.Description, "upstream ill is unreachable") {
		t.Fatalf("provision ended %+v, want failed naming the upstream", lo)
	}
	for _, internal := range []string{"127.0.0.1", "dial tcp", "connection refused", "http://"} {
		if strings.Contains(lo.Description, internal) {
			t.Errorf("description %q shows the platform %q", lo.Description, internal)
		}
	}
	if !strings.Contains(e.log.String(), "connection refused") {
		t.Error("the log lacks the transport error")
	}
}
