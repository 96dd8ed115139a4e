package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

var binary, illBinary string

func TestMain(m *testing.M) {
	harness.RunMain(m, nil, harness.Binary{Path: &binary, Build: harness.Build}, harness.Binary{Path: &illBinary, Build: harness.BuildIllBroker})
}

// front starts a bucketbroker that serves only the ill broker's services.
func front(t *testing.T, ib *harness.IllBroker) *harness.Broker {
	t.Helper()
	b := harness.New(t, binary)
	b.Front("ill", ib.URL(), harness.IllUser, harness.IllPass, false)
	b.Start()
	return b
}

func illBody(plan string) map[string]any {
	return map[string]any{"service_id": illbroker.ServiceID, "plan_id": plan, "organization_guid": "org", "space_guid": "space",
		"parameters": map[string]any{"size": "small"}, "context": map[string]any{"platform": "cloudfoundry"}}
}

func illQuery(plan string) string {
	return fmt.Sprintf("?service_id=%s&plan_id=%s", illbroker.ServiceID, plan)
}

func want(t *testing.T, r harness.Reply, codes ...int) harness.Reply {
	t.Helper()
	for _, c := range codes {
		if r.Err == nil && r.Code == c {
			return r
		}
	}
	t.Fatalf("answer %s, want one of %v", r, codes)
	return r
}

// noErrorLines checks that the broker logged no ERROR line.
func noErrorLines(t *testing.T, b *harness.Broker) {
	t.Helper()
	for _, l := range strings.Split(b.Log(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			t.Errorf("ERROR line in the broker's log: %s", l)
		}
	}
}

// storm sends n copies of one request at once and returns the answers.
func storm(b *harness.Broker, n int, method, path string, body any) []harness.Reply {
	out := make([]harness.Reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = b.Do(method, path, body) }()
	}
	wg.Wait()
	return out
}

func TestFrontOfIllBroker(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary, "-async-delay", "500ms", "-duplicate-status", "500")
	b := front(t, ib)

	cat := want(t, b.Do("GET", "/v2/catalog", nil), http.StatusOK)
	if s, _ := cat.Body["services"].([]any); len(s) != 1 || !strings.Contains(fmt.Sprint(s[0]), illbroker.ServiceID) {
		t.Fatalf("catalog without the bucket service: %v", cat.Body)
	}

	// Synchronous: a storm of identical provisions, one upstream create.
	const n = 50
	for _, r := range storm(b, n, "PUT", "/v2/service_instances/i-sync", illBody(illbroker.PlanSync)) {
		want(t, r, http.StatusCreated, http.StatusOK)
	}
	// A conflicting one: 409, and the upstream sees nothing.
	conflict := illBody(illbroker.PlanSync)
	conflict["parameters"] = map[string]any{"size": "large"}
	want(t, b.Do("PUT", "/v2/service_instances/i-sync", conflict), http.StatusConflict)
	if in := ib.State().Instances["i-sync"]; in.Creates != 1 || string(in.Parameters) != `{"size":"small"}` {
		t.Fatalf("upstream instance after the storm and a conflict: %+v, want one create", in)
	}

	// A storm of identical binds: one upstream create, the same
	// credentials in every answer.
	bindPath := "/v2/service_instances/i-sync/service_bindings/b-sync"
	bind := map[string]any{"service_id": illbroker.ServiceID, "plan_id": illbroker.PlanSync}
	creds := map[string]int{}
	for _, r := range storm(b, n, "PUT", bindPath, bind) {
		want(t, r, http.StatusCreated, http.StatusOK)
		creds[fmt.Sprint(r.Creds())]++
	}
	if len(creds) != 1 {
		t.Fatalf("bind storm: %d different credentials", len(creds))
	}
	if bs := ib.State().Bindings["b-sync"]; bs.Creates != 1 || bs.CredentialsIssued != 1 {
		t.Fatalf("upstream binding after the storm: %+v", bs)
	}
	got := want(t, b.Do("GET", bindPath, nil), http.StatusOK)
	if fmt.Sprint(got.Creds()) == "map[]" || creds[fmt.Sprint(got.Creds())] != n {
		t.Fatalf("GET binding: %v", got.Body)
	}

	// Asynchronous: 202, polled through bucketbroker's own operation.
	asyncPath := "/v2/service_instances/i-async"
	r := want(t, b.Do("PUT", asyncPath+"?accepts_incomplete=true", illBody(illbroker.PlanAsync)), http.StatusAccepted)
	if again := want(t, b.Do("PUT", asyncPath+"?accepts_incomplete=true", illBody(illbroker.PlanAsync)), http.StatusAccepted); again.Operation() != r.Operation() {
		t.Fatalf("duplicate async provision: operation %q, want %q", again.Operation(), r.Operation())
	}
	if lo, err := b.LastOperation(60*time.Second, asyncPath, r.Operation()); err != nil || lo.State() != "succeeded" {
		t.Fatalf("async provision: %s, %v", lo, err)
	}
	if got := want(t, b.Do("GET", asyncPath, nil), http.StatusOK); got.Body["dashboard_url"] != "https://dashboard.example/si-i-async" {
		t.Errorf("GET instance: %v, want the upstream's dashboard_url", got.Body)
	}
	for _, id := range []string{"b-a1", "b-a2"} {
		want(t, b.Do("PUT", asyncPath+"/service_bindings/"+id, map[string]any{"service_id": illbroker.ServiceID, "plan_id": illbroker.PlanAsync}), http.StatusCreated)
	}
	// The ill broker refuses to deprovision an instance with bindings:
	// this succeeds because bucketbroker unbinds them upstream first.
	r = want(t, b.Do("DELETE", asyncPath+illQuery(illbroker.PlanAsync)+"&accepts_incomplete=true", nil), http.StatusAccepted)
	if lo, err := b.LastOperation(60*time.Second, asyncPath, r.Operation()); err != nil || (lo.Code != http.StatusGone && lo.State() != "succeeded") {
		t.Fatalf("async deprovision with bindings: %s, %v", lo, err)
	}
	want(t, b.Do("DELETE", bindPath+illQuery(illbroker.PlanSync), nil), http.StatusOK)
	want(t, b.Do("DELETE", bindPath+illQuery(illbroker.PlanSync), nil), http.StatusGone)
	want(t, b.Do("DELETE", "/v2/service_instances/i-sync"+illQuery(illbroker.PlanSync), nil), http.StatusOK)

	st := ib.State()
	for id, in := range st.Instances {
		if in.Exists || in.Creates != 1 || in.Deletes != 1 {
			t.Errorf("upstream instance %s: %+v, want created and deleted once", id, in)
		}
	}
	for id, bs := range st.Bindings {
		if bs.Exists || bs.Creates != 1 || bs.Deletes != 1 {
			t.Errorf("upstream binding %s: %+v, want created and deleted once", id, bs)
		}
	}
	noErrorLines(t, b)
	if pw, _ := got.Creds()["password"].(string); pw == "" || strings.Contains(b.Log(), pw) {
		t.Errorf("a binding's password is missing (%q) or in the broker's log", pw)
	}
}

func TestFrontOfFlakyIllBrokerConverges(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary, "-fail-rate", "0.3", "-seed", "11", "-async-delay", "100ms")
	b := front(t, ib)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			plan := illbroker.PlanSync
			if i%2 == 1 {
				plan = illbroker.PlanAsync
			}
			path := fmt.Sprintf("/v2/service_instances/i-%d", i)
			if _, err := b.Until(60*time.Second, "PUT", path, illBody(plan), http.StatusCreated, http.StatusOK); err != nil {
				t.Error(err)
				return
			}
			for range 3 { // duplicates after the creation, as a platform re-sends
				if r := b.Do("PUT", path, illBody(plan)); r.Err != nil || r.Code != http.StatusOK {
					t.Errorf("duplicate provision of %s: %s", path, r)
				}
			}
			bp := fmt.Sprintf("%s/service_bindings/b-%d", path, i)
			body := map[string]any{"service_id": illbroker.ServiceID, "plan_id": plan}
			first, err := b.Until(60*time.Second, "PUT", bp, body, http.StatusCreated, http.StatusOK)
			if err != nil {
				t.Error(err)
				return
			}
			if again := b.Do("PUT", bp, body); again.Err != nil || again.Code != http.StatusOK || fmt.Sprint(again.Creds()) != fmt.Sprint(first.Creds()) {
				t.Errorf("duplicate bind of %s: %s", bp, again)
			}
			if _, err := b.Until(60*time.Second, "DELETE", path+illQuery(plan), nil, http.StatusOK); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st := ib.State()
	if len(st.Instances) != 8 {
		t.Fatalf("upstream knows %d instances, want 8", len(st.Instances))
	}
	for id, in := range st.Instances {
		if in.Exists || in.Creates != 1 || in.Deletes != 1 {
			t.Errorf("upstream instance %s: %+v, want created and deleted once", id, in)
		}
	}
	for id, bs := range st.Bindings {
		if bs.Exists || bs.Creates != 1 || bs.Deletes != 1 {
			t.Errorf("upstream binding %s: %+v, want created and deleted once", id, bs)
		}
	}
	if st.Failures["500-after"]+st.Failures["drop-after"] == 0 {
		t.Error("the ill broker lost no answer: the test proves nothing about adoption")
	}
	t.Logf("failures injected: %v", st.Failures)
	noErrorLines(t, b)
}

func TestFailedAsyncUpstreamProvisionIsMadeAgain(t *testing.T) {
	// Seed 2, rate 0.5: the first async provision fails upstream, the
	// second succeeds (internal/upstream's test checks the same draws).
	ib := harness.StartIllBroker(t, illBinary, "-async-delay", "100ms", "-failed-op-rate", "0.5", "-seed", "2", "-duplicate-status", "409")
	b := front(t, ib)
	path := "/v2/service_instances/i-f"
	r := want(t, b.Do("PUT", path+"?accepts_incomplete=true", illBody(illbroker.PlanAsync)), http.StatusAccepted)
	lo, err := b.LastOperation(60*time.Second, path, r.Operation())
	if err != nil || lo.State() != "failed" || !strings.Contains(lo.Description(), "provisioning the backing instance failed") {
		t.Fatalf("first provision: %s, %v; want failed with the upstream's description", lo, err)
	}
	r = want(t, b.Do("PUT", path+"?accepts_incomplete=true", illBody(illbroker.PlanAsync)), http.StatusAccepted)
	if lo, err := b.LastOperation(60*time.Second, path, r.Operation()); err != nil || lo.State() != "succeeded" {
		t.Fatalf("provision sent again: %s, %v", lo, err)
	}
	if in := ib.State().Instances["i-f"]; !in.Exists || in.State != "ready" || in.Deletes != 1 || in.Creates != 2 {
		t.Fatalf("upstream: %+v, want the failed instance deleted and one live one", in)
	}
	noErrorLines(t, b)
}

func TestFrontOfBucketbroker(t *testing.T) {
	up := harness.New(t, binary)
	up.Start()
	b := harness.New(t, binary)
	b.Front("buckets", up.URL(), harness.User, harness.Pass, false)
	b.Start()

	path := "/v2/service_instances/bb-1"
	for _, r := range storm(b, 20, "PUT", path, harness.ProvisionBody) {
		want(t, r, http.StatusCreated, http.StatusOK)
	}
	bp := path + "/service_bindings/bb-b1"
	creds := map[string]bool{}
	for _, r := range storm(b, 20, "PUT", bp, harness.BindBody) {
		want(t, r, http.StatusCreated, http.StatusOK)
		creds[fmt.Sprint(r.Creds())] = true
	}
	if len(creds) != 1 {
		t.Fatalf("bind storm through bucketbroker: %d different credentials", len(creds))
	}
	// The credentials are the upstream's, verbatim.
	direct := want(t, up.Do("GET", bp, nil), http.StatusOK)
	if !creds[fmt.Sprint(direct.Creds())] {
		t.Fatalf("credentials differ from the upstream's own: %v", direct.Creds())
	}
	if bs, _ := up.Backend.Buckets(); len(bs) != 1 {
		t.Fatalf("upstream buckets: %v, want one", bs)
	}
	// Asynchronously: 202, polled through the front broker's operation.
	ap := "/v2/service_instances/bb-2"
	r := want(t, b.Do("PUT", ap+"?accepts_incomplete=true", harness.ProvisionBody), http.StatusAccepted)
	if lo, err := b.LastOperation(60*time.Second, ap, r.Operation()); err != nil || lo.State() != "succeeded" {
		t.Fatalf("async provision through bucketbroker: %s, %v", lo, err)
	}
	want(t, up.Do("GET", ap, nil), http.StatusOK)
	r = want(t, b.Do("DELETE", ap+harness.DeleteQuery+"&accepts_incomplete=true", nil), http.StatusAccepted)
	if lo, err := b.LastOperation(60*time.Second, ap, r.Operation()); err != nil || (lo.Code != http.StatusGone && lo.State() != "succeeded") {
		t.Fatalf("async deprovision through bucketbroker: %s, %v", lo, err)
	}
	// An unbind through the front broker revokes the upstream's key; a
	// second binding is left for the deprovision to revoke.
	want(t, b.Do("DELETE", bp+harness.DeleteQuery, nil), http.StatusOK)
	want(t, up.Do("GET", bp, nil), http.StatusNotFound)
	if k, _ := up.Backend.Keys(); len(k) != 0 {
		t.Fatalf("upstream keys after the unbind: %v", k)
	}
	bp = path + "/service_bindings/bb-b2"
	want(t, b.Do("PUT", bp+"?accepts_incomplete=true", harness.BindBody), http.StatusCreated, http.StatusAccepted)
	want(t, b.Do("DELETE", path+harness.DeleteQuery, nil), http.StatusOK)
	want(t, up.Do("GET", bp, nil), http.StatusNotFound)
	if bs, _ := up.Backend.Buckets(); len(bs) != 0 {
		t.Fatalf("upstream buckets after deprovision: %v", bs)
	}
	noErrorLines(t, b)
}

func TestStartUpRefusals(t *testing.T) {
	up := harness.New(t, binary)
	up.Start()
	// The bucket service beside an upstream with the same catalog: the
	// ids collide, and start-up names both sides.
	b := harness.New(t, binary)
	b.Front("twin", up.URL(), harness.User, harness.Pass, true)
	if err := b.TryStart(); err == nil {
		t.Fatal("started with colliding catalogs")
	}
	if !b.LogShows(5*time.Second, "the bucket catalog", `upstream "twin"`) {
		t.Errorf("start-up error does not name both sides:\n%s", harness.Tail(b.Log(), 2000))
	}
	// An upstream that does not answer: exit after the catalog timeout,
	// naming it.
	c := harness.New(t, binary)
	c.Front("nowhere", "http://"+harness.FreeAddr(t), "u", "p", false)
	c.Args = append(c.Args, "--upstream-catalog-timeout", "1s")
	if err := c.TryStart(); err == nil {
		t.Fatal("started without its upstream's catalog")
	}
	if !c.LogShows(5*time.Second, "upstream nowhere", "no catalog within 1s") {
		t.Errorf("start-up error does not name the upstream:\n%s", harness.Tail(c.Log(), 2000))
	}
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

// TestRotationThroughTheFront: a bind naming predecessor_binding_id on a
// binding_rotatable plan of a bucketbroker upstream is forwarded as a
// rotation: the upstream's new key keeps the predecessor's read-only
// access (a plain bind would get the plan's read-write default), and both
// keys work until each is unbound. A plan the upstream does not say
// binding_rotatable for is refused with 400 before reaching it.
func TestRotationThroughTheFront(t *testing.T) {
	up := harness.New(t, binary)
	up.Start()
	b := harness.New(t, binary)
	b.Front("buckets", up.URL(), harness.User, harness.Pass, false)
	b.Start()

	path := "/v2/service_instances/rot-1"
	want(t, b.Do("PUT", path, harness.ProvisionBody), http.StatusCreated)
	readOnly := map[string]any{"service_id": harness.ServiceID, "plan_id": harness.PlanStd, "app_guid": "app",
		"parameters": map[string]any{"access": "read-only"}}
	old := want(t, b.Do("PUT", path+"/service_bindings/rot-old", readOnly), http.StatusCreated)
	rotation := map[string]any{"service_id": harness.ServiceID, "plan_id": harness.PlanStd, "app_guid": "app",
		"predecessor_binding_id": "rot-old"}
	rotated := want(t, b.Do("PUT", path+"/service_bindings/rot-new", rotation), http.StatusCreated)
	if got := rotated.Creds()["access"]; got != "read-only" {
		t.Fatalf("rotated binding's access %v, want its predecessor's read-only (was predecessor_binding_id forwarded?)", got)
	}
	if rotated.Creds()["access_key_id"] == old.Creds()["access_key_id"] {
		t.Fatal("the rotation answered the predecessor's key")
	}
	// A replay is answered from the record, the same credentials.
	again := want(t, b.Do("PUT", path+"/service_bindings/rot-new", rotation), http.StatusOK)
	if fmt.Sprint(again.Creds()) != fmt.Sprint(rotated.Creds()) {
		t.Fatal("the replayed rotation answered other credentials")
	}
	if k, _ := up.Backend.Keys(); len(k) != 2 {
		t.Fatalf("upstream keys after the rotation: %v, want the predecessor's and the new one", k)
	}
	// A predecessor that does not exist is refused, and nothing is made.
	r := b.Do("PUT", path+"/service_bindings/rot-bad", map[string]any{"service_id": harness.ServiceID, "plan_id": harness.PlanStd,
		"predecessor_binding_id": "nope"})
	want(t, r, http.StatusBadRequest)
	want(t, up.Do("GET", path+"/service_bindings/rot-bad", nil), http.StatusNotFound)
	want(t, b.Do("DELETE", path+harness.DeleteQuery, nil), http.StatusOK)
	if k, _ := up.Backend.Keys(); len(k) != 0 {
		t.Fatalf("upstream keys after the deprovision: %v", k)
	}
	noErrorLines(t, b)
}
