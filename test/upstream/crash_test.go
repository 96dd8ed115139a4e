package upstream

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// TestCrashPointsOfTheUpstreamPath kills the front broker (exit 137, as
// kill -9) at every crash point of the upstream path (the upstream
// backend's, and the engine's own that an upstream's records pass), on the ill broker's
// sync and async plans; starts it again on the same data dir; replays what
// a platform would; and checks that the upstream saw exactly one create
// (and one delete) per id and that every answer carries the credentials
// the upstream issued.
func TestCrashPointsOfTheUpstreamPath(t *testing.T) {
	points := append([]crashpoint.Point{crashpoint.ProvisionRecordWritten, crashpoint.BindRecordWritten,
		crashpoint.UnbindRecordWritten, crashpoint.DeprovisionRecordWritten}, crashpoint.UpstreamPoints...)
	for _, p := range points {
		for _, plan := range []string{illbroker.PlanSync, illbroker.PlanAsync} {
			name := strings.ReplaceAll(string(p), "/", "_") + map[string]string{illbroker.PlanSync: "_sync", illbroker.PlanAsync: "_async"}[plan]
			t.Run(name, func(t *testing.T) { crashCell(t, p, plan) })
		}
	}
}

func crashCell(t *testing.T, p crashpoint.Point, plan string) {
	dup := "409"
	if plan == illbroker.PlanAsync {
		dup = "500"
	}
	ib := harness.StartIllBroker(t, illBinary, "-async-delay", "200ms", "-duplicate-status", dup)
	b := harness.New(t, binary)
	b.Front("ill", ib.URL(), harness.IllUser, harness.IllPass, false)
	async := plan == illbroker.PlanAsync
	q := func(base string) string {
		if async {
			if base == "" {
				return "?accepts_incomplete=true"
			}
			return base + "&accepts_incomplete=true"
		}
		return base
	}
	path := "/v2/service_instances/i-c"
	bp := path + "/service_bindings/b-c"
	bindBody := map[string]any{"service_id": illbroker.ServiceID, "plan_id": plan}
	// provisioned brings the instance to ready through the front broker.
	provisioned := func() {
		t.Helper()
		r := want(t, b.Do("PUT", path+q(""), illBody(plan)), http.StatusCreated, http.StatusOK, http.StatusAccepted)
		if r.Code == http.StatusAccepted {
			if lo, err := b.LastOperation(60*time.Second, path, r.Operation()); err != nil || lo.State() != "succeeded" {
				t.Fatalf("provision: %s, %v", lo, err)
			}
		}
	}
	// crash sends the request that dies at p, waits for the death and
	// starts the broker again without crash points.
	crash := func(method, target string, body any) {
		t.Helper()
		b.Stop()
		b.Start(string(p))
		first := b.Do(method, target, body)
		if err := b.TryWaitCrash(60 * time.Second); err != nil {
			t.Fatalf("%s %s answered %s and did not die at %s: %v", method, target, first, p, err)
		}
		b.Start()
	}
	b.Start()
	switch p {
	case crashpoint.ProvisionUpstreamAnswered, crashpoint.ProvisionRecordWritten:
		crash("PUT", path+q(""), illBody(plan))
		provisioned() // the platform re-sends
		if in := ib.State().Instances["i-c"]; in.Creates != 1 || !in.Exists || in.State != "ready" {
			t.Fatalf("upstream instance after the crash and the replay: %+v", in)
		}
	case crashpoint.BindUpstreamAnswered, crashpoint.BindUpstreamRecorded, crashpoint.BindRecordWritten:
		provisioned()
		crash("PUT", bp, bindBody)
		r := want(t, b.Do("PUT", bp, bindBody), http.StatusCreated, http.StatusOK)
		again := want(t, b.Do("PUT", bp, bindBody), http.StatusOK)
		got := want(t, b.Do("GET", bp, nil), http.StatusOK)
		direct := want(t, directGet(t, ib, bp), http.StatusOK)
		if fmt.Sprint(r.Creds()) != fmt.Sprint(direct.Creds()) || fmt.Sprint(again.Creds()) != fmt.Sprint(direct.Creds()) ||
			fmt.Sprint(got.Creds()) != fmt.Sprint(direct.Creds()) {
			t.Fatalf("credentials after the crash: replay %v, again %v, GET %v; the upstream issued %v", r.Creds(), again.Creds(), got.Creds(), direct.Creds())
		}
		if bs := ib.State().Bindings["b-c"]; bs.Creates != 1 || bs.CredentialsIssued != 1 || !bs.Exists {
			t.Fatalf("upstream binding after the crash and the replay: %+v", bs)
		}
	case crashpoint.UnbindUpstreamDeleted, crashpoint.UnbindRecordWritten:
		provisioned()
		want(t, b.Do("PUT", bp, bindBody), http.StatusCreated)
		crash("DELETE", bp+illQuery(plan), nil)
		want(t, b.Do("DELETE", bp+illQuery(plan), nil), http.StatusOK, http.StatusGone)
		want(t, b.Do("GET", bp, nil), http.StatusNotFound)
		if bs := ib.State().Bindings["b-c"]; bs.Creates != 1 || bs.Deletes != 1 || bs.Exists {
			t.Fatalf("upstream binding after the crash and the replay: %+v", bs)
		}
	case crashpoint.DeprovisionUpstreamDeleted, crashpoint.DeprovisionRecordWritten:
		provisioned()
		want(t, b.Do("PUT", bp, bindBody), http.StatusCreated)
		crash("DELETE", path+q(illQuery(plan)), nil)
		r := want(t, b.Do("DELETE", path+q(illQuery(plan)), nil), http.StatusOK, http.StatusAccepted, http.StatusGone)
		if r.Code == http.StatusAccepted {
			if lo, err := b.LastOperation(60*time.Second, path, r.Operation()); err != nil || (lo.Code != http.StatusGone && lo.State() != "succeeded") {
				t.Fatalf("deprovision replay: %s, %v", lo, err)
			}
		}
		st := ib.State()
		if in, bs := st.Instances["i-c"], st.Bindings["b-c"]; in.Creates != 1 || in.Deletes != 1 || in.Exists || bs.Deletes != 1 || bs.Exists {
			t.Fatalf("upstream after the crash and the replay: instance %+v, binding %+v", in, bs)
		}
	default:
		t.Fatalf("no scenario for crash point %s", p)
	}
	noErrorLines(t, b)
}

// directGet sends a GET to the ill broker itself, bypassing bucketbroker.
func directGet(t *testing.T, ib *harness.IllBroker, path string) harness.Reply {
	t.Helper()
	req, err := http.NewRequest("GET", ib.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(harness.IllUser, harness.IllPass)
	req.Header.Set("X-Broker-API-Version", "2.17")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return harness.Reply{Err: err}
	}
	defer resp.Body.Close()
	r := harness.Reply{Code: resp.StatusCode, Body: map[string]any{}}
	_ = jsonDecode(resp, &r.Body)
	return r
}
