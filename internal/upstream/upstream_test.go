package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

var illBin string

func TestMain(m *testing.M) {
	harness.RunMain(m, nil, harness.Binary{Path: &illBin, Build: harness.BuildIllBroker})
}

// env is an engine whose only service is the ill broker's, run as its own
// process.
type env struct {
	t   *testing.T
	ib  *harness.IllBroker
	up  *upstream.Upstream
	eng *engine.Engine
	st  *sqlite.Store
	log *harness.LockedBuffer
	// direct talks to the ill broker without bucketbroker.
	direct *osbclient.Client
}

type envOpts struct {
	illArgs []string
	// via, when set, is put between the engine and the ill broker.
	via func(target *url.URL) string
	// syncTimeout is the engine's (default 30s).
	syncTimeout time.Duration
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	ib := harness.StartIllBroker(t, illBin, o.illArgs...)
	target := ib.URL()
	if o.via != nil {
		u, _ := url.Parse(target)
		target = o.via(u)
	}
	up, err := upstream.New(upstream.Config{Name: "ill", PollInterval: 20 * time.Millisecond,
		Client: osbclient.Config{URL: target, Username: harness.IllUser, Password: harness.IllPass, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := up.FetchCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := up.CatalogSource()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Merge(nil, src)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	box, err := secretbox.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &harness.LockedBuffer{}
	if o.syncTimeout == 0 {
		o.syncTimeout = 30 * time.Second
	}
	eng, err := engine.New(engine.Options{Store: st, Catalog: cat, Box: box, Backends: []engine.Backend{up},
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		SyncTimeout: o.syncTimeout, AsyncTimeout: 60 * time.Second, LeaseTTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(ctx)
		if t.Failed() {
			t.Logf("engine log (tail):\n%s", harness.Tail(logs.String(), 6000))
		}
	})
	direct, err := osbclient.New(osbclient.Config{URL: ib.URL(), Username: harness.IllUser, Password: harness.IllPass})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ib: ib, up: up, eng: eng, st: st, log: logs, direct: direct}
}

const identity = "kubernetes eyJ1c2VybmFtZSI6ImFsaWNlIn0="

func provision(id, plan string, async bool, params string) engine.ProvisionRequest {
	return engine.ProvisionRequest{InstanceID: id, ServiceID: illbroker.ServiceID, PlanID: plan, AcceptsIncomplete: async,
		Parameters: json.RawMessage(params), Context: json.RawMessage(`{"platform":"kubernetes","namespace":"ns1"}`), Identity: identity}
}

func bind(instanceID, id string) engine.BindRequest {
	return engine.BindRequest{InstanceID: instanceID, BindingID: id, ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync, Identity: identity}
}

// waitOp polls an instance's or binding's operation until it ends.
func (e *env) waitOp(kind engine.Kind, instanceID, id, op string) engine.LastOperation {
	e.t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var lo engine.LastOperation
		var err error
		if kind == engine.KindInstance {
			lo, err = e.eng.InstanceLastOperation(ctx, id, op)
		} else {
			lo, err = e.eng.BindingLastOperation(ctx, instanceID, id, op)
		}
		if err != nil {
			e.t.Fatalf("last_operation of %s %s: %v", kind, id, err)
		}
		if lo.Gone || lo.State != engine.OpInProgress {
			return lo
		}
	}
	e.t.Fatalf("operation %s of %s %s did not end within 60s", op, kind, id)
	return engine.LastOperation{}
}

func (e *env) noErrorLines() {
	e.t.Helper()
	for _, l := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			e.t.Errorf("ERROR line in the engine's log: %s", l)
		}
	}
}

func (e *env) noSecretsLogged(creds json.RawMessage) {
	e.t.Helper()
	var c struct {
		Password string `json:"password"`
	}
	if err := json.Unmarshal(creds, &c); err != nil || c.Password == "" {
		e.t.Fatalf("credentials %d bytes without a password: %v", len(creds), err)
	}
	if strings.Contains(e.log.String(), c.Password) {
		e.t.Error("the engine's log holds a binding's password")
	}
}

func TestSyncLifecycleForwardsAndIsExactlyOnce(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-duplicate-status", "409"}})
	ctx := context.Background()
	req := provision("i-1", illbroker.PlanSync, false, `{"size":"small"}`)
	res, err := e.eng.Provision(ctx, req)
	if err != nil || res.Outcome != engine.OutcomeCreated {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	const dash = "https://dashboard.example/si-i-1"
	if res.DashboardURL != dash {
		t.Errorf("provision answered dashboard_url %q, want the upstream's %q", res.DashboardURL, dash)
	}
	if res, err = e.eng.Provision(ctx, req); err != nil || res.Outcome != engine.OutcomeOK || res.DashboardURL != dash {
		t.Fatalf("duplicate provision: %+v, %v", res, err)
	}
	if v, err := e.eng.GetInstance(ctx, "i-1"); err != nil || v.DashboardURL != dash || string(v.Parameters) != `{"size":"small"}` {
		t.Fatalf("GET instance: %+v, %v", v, err)
	}
	in := e.ib.State().Instances["i-1"]
	if in == nil || in.Creates != 1 || in.State != "ready" {
		t.Fatalf("upstream instance after a provision and its duplicate: %+v, want one create", in)
	}
	if in.Identity != identity || string(in.Parameters) != `{"size":"small"}` || !strings.Contains(string(in.Context), `"namespace":"ns1"`) {
		t.Errorf("upstream got identity %q, parameters %s, context %s", in.Identity, in.Parameters, in.Context)
	}
	// A conflicting provision never reaches the upstream.
	if _, err := e.eng.Provision(ctx, provision("i-1", illbroker.PlanSync, false, `{"size":"large"}`)); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("conflicting provision: %v, want ErrConflict", err)
	}
	if n := e.ib.State().Instances["i-1"].Creates; n != 1 {
		t.Fatalf("upstream creates after a conflict: %d", n)
	}

	b, err := e.eng.Bind(ctx, bind("i-1", "b-1"))
	if err != nil || b.Outcome != engine.OutcomeCreated || len(b.RawCredentials) == 0 {
		t.Fatalf("bind: %+v, %v", b.Result, err)
	}
	again, err := e.eng.Bind(ctx, bind("i-1", "b-1"))
	if err != nil || again.Outcome != engine.OutcomeOK || string(again.RawCredentials) != string(b.RawCredentials) {
		t.Fatalf("duplicate bind: %+v, %v; same credentials: %v", again.Result, err, string(again.RawCredentials) == string(b.RawCredentials))
	}
	v, err := e.eng.GetBinding(ctx, "i-1", "b-1")
	if err != nil || string(v.RawCredentials) != string(b.RawCredentials) {
		t.Fatalf("GET binding: %v; same credentials: %v", err, v != nil && string(v.RawCredentials) == string(b.RawCredentials))
	}
	if bs := e.ib.State().Bindings["b-1"]; bs == nil || bs.Creates != 1 || bs.CredentialsIssued != 1 || bs.Identity != identity {
		t.Fatalf("upstream binding: %+v, want one create with the identity", bs)
	}
	e.noSecretsLogged(b.RawCredentials)

	if _, err := e.eng.Unbind(ctx, engine.UnbindRequest{InstanceID: "i-1", BindingID: "b-1", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatalf("unbind: %v", err)
	}
	if _, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "i-1", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatalf("deprovision: %v", err)
	}
	st := e.ib.State()
	if in, bs := st.Instances["i-1"], st.Bindings["b-1"]; in.Exists || in.Deletes != 1 || bs.Exists || bs.Deletes != 1 {
		t.Fatalf("upstream after unbind and deprovision: instance %+v, binding %+v", in, bs)
	}
	e.noErrorLines()
}

func TestAsyncProvisionIsPolledAndDeprovisionUnbindsFirst(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-async-delay", "300ms", "-duplicate-status", "500"}})
	ctx := context.Background()
	req := provision("i-a", illbroker.PlanAsync, true, "")
	res, err := e.eng.Provision(ctx, req)
	if err != nil || res.Outcome != engine.OutcomeAccepted {
		t.Fatalf("async provision: %+v, %v", res, err)
	}
	if again, err := e.eng.Provision(ctx, req); err != nil || again.Operation != res.Operation {
		t.Fatalf("duplicate async provision: %+v, %v; want operation %s", again, err, res.Operation)
	}
	if lo := e.waitOp(engine.KindInstance, "", "i-a", res.Operation); lo.State != engine.OpSucceeded {
		t.Fatalf("async provision ended %+v", lo)
	}
	if in := e.ib.State().Instances["i-a"]; in.Creates != 1 || in.State != "ready" {
		t.Fatalf("upstream instance: %+v", in)
	}
	for _, id := range []string{"b-a1", "b-a2"} {
		if _, err := e.eng.Bind(ctx, engine.BindRequest{InstanceID: "i-a", BindingID: id, ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync}); err != nil {
			t.Fatalf("bind %s: %v", id, err)
		}
	}
	// The ill broker refuses (400) to deprovision an instance with
	// bindings: this succeeds only if both were unbound upstream first.
	dep, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "i-a", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanAsync, AcceptsIncomplete: true})
	if err != nil || dep.Outcome != engine.OutcomeAccepted {
		t.Fatalf("deprovision: %+v, %v", dep, err)
	}
	if lo := e.waitOp(engine.KindInstance, "", "i-a", dep.Operation); lo.State != engine.OpSucceeded {
		t.Fatalf("deprovision ended %+v", lo)
	}
	st := e.ib.State()
	if in := st.Instances["i-a"]; in.Exists || in.Deletes != 1 {
		t.Fatalf("upstream instance after deprovision: %+v", in)
	}
	for _, id := range []string{"b-a1", "b-a2"} {
		if bs := st.Bindings[id]; bs.Exists || bs.Creates != 1 || bs.Deletes != 1 {
			t.Fatalf("upstream binding %s after deprovision: %+v", id, bs)
		}
	}
	e.noErrorLines()
}

func TestStormOfIdenticalRequestsCreatesOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	const n = 50
	storm := func(call func() (string, error)) map[string]int {
		var mu sync.Mutex
		answers := map[string]int{}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := call()
				if err != nil {
					a = "error: " + err.Error()
				}
				mu.Lock()
				answers[a]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return answers
	}
	got := storm(func() (string, error) {
		_, err := e.eng.Provision(ctx, provision("i-s", illbroker.PlanSync, false, `{"a":1}`))
		return "ok", err
	})
	if got["ok"] != n {
		t.Fatalf("provision storm answers: %v", got)
	}
	got = storm(func() (string, error) {
		b, err := e.eng.Bind(ctx, bind("i-s", "b-s"))
		return string(b.RawCredentials), err
	})
	if len(got) != 1 {
		t.Fatalf("bind storm: %d different answers, want the same credentials in all: %v", len(got), keys(got))
	}
	st := e.ib.State()
	if in, bs := st.Instances["i-s"], st.Bindings["b-s"]; in.Creates != 1 || bs.Creates != 1 || bs.CredentialsIssued != 1 {
		t.Fatalf("upstream after the storms: instance %+v, binding %+v; want one create each", in, bs)
	}
	e.noErrorLines()
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		if len(k) > 80 {
			k = k[:80]
		}
		out = append(out, k)
	}
	return out
}

// lossy forwards to target and, for the requests lose picks, lets the
// upstream do the work but drops the connection instead of answering.
func lossy(t *testing.T, target *url.URL, lose func(r *http.Request) bool) string {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lose(r) {
			proxy.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		out, _ := http.NewRequest(r.Method, target.String()+r.URL.RequestURI(), strings.NewReader(string(body)))
		out.Header = r.Header.Clone()
		if resp, err := http.DefaultClient.Do(out); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// firstPUT loses the answer to the first PUT of each path.
func firstPUT() func(r *http.Request) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(r *http.Request) bool {
		if r.Method != http.MethodPut {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		lose := !seen[r.URL.Path]
		seen[r.URL.Path] = true
		return lose
	}
}

func TestLostAnswersAreAdopted(t *testing.T) {
	for _, dup := range []string{"409", "500"} {
		t.Run("duplicate answered "+dup, func(t *testing.T) {
			lose := firstPUT()
			e := newEnv(t, envOpts{illArgs: []string{"-duplicate-status", dup}, via: func(u *url.URL) string { return lossy(t, u, lose) }})
			ctx := context.Background()
			if _, err := e.eng.Provision(ctx, provision("i-l", illbroker.PlanSync, false, "")); err != nil {
				t.Fatalf("provision whose first answer was lost: %v", err)
			}
			b, err := e.eng.Bind(ctx, bind("i-l", "b-l"))
			if err != nil || len(b.RawCredentials) == 0 {
				t.Fatalf("bind whose first answer was lost: %v", err)
			}
			st := e.ib.State()
			if in, bs := st.Instances["i-l"], st.Bindings["b-l"]; in.Creates != 1 || bs.Creates != 1 || bs.CredentialsIssued != 1 {
				t.Fatalf("upstream: instance %+v, binding %+v; want one create each", in, bs)
			}
			if !strings.Contains(e.log.String(), "Adopted the upstream instance of an earlier attempt") ||
				!strings.Contains(e.log.String(), "Adopted the upstream binding of an earlier attempt") {
				t.Error("no adoption logged")
			}
			e.noErrorLines()
		})
	}
}

func TestFirstCreateConflictIsNotOurs(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-duplicate-status", "409"}})
	ctx := context.Background()
	// Someone else made the instance upstream, under the id.
	if _, err := e.direct.Provision(ctx, "i-x", osbclient.ProvisionRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatal(err)
	}
	_, err := e.eng.Provision(ctx, provision("i-x", illbroker.PlanSync, false, ""))
	if !errors.Is(err, engine.ErrFailed) || !strings.Contains(err.Error(), "did not create") {
		t.Fatalf("provision of an id someone else holds upstream: %v, want a failure saying so", err)
	}
	if in := e.ib.State().Instances["i-x"]; !in.Exists || in.Deletes != 0 || in.Creates != 1 {
		t.Fatalf("the other's instance: %+v, want it left alone", in)
	}
	// The platform cleans up after the failed provision: the deprovision
	// succeeds and leaves the other's instance alone.
	if _, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: "i-x", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatalf("deprovision after the refusal: %v", err)
	}
	if in := e.ib.State().Instances["i-x"]; !in.Exists || in.Deletes != 0 {
		t.Fatalf("the other's instance after our deprovision: %+v, want it left alone", in)
	}
}

func TestFailedAsyncProvisionIsCreatedAgainOnRetry(t *testing.T) {
	// Seed 2 with a rate of 0.5: the first asynchronous provision fails,
	// the next succeeds (checked below, so a change of the ill broker's
	// random draws shows here).
	e := newEnv(t, envOpts{illArgs: []string{"-async-delay", "100ms", "-failed-op-rate", "0.5", "-seed", "2", "-duplicate-status", "409"}})
	ctx := context.Background()
	req := provision("i-f", illbroker.PlanAsync, true, "")
	res, err := e.eng.Provision(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	lo := e.waitOp(engine.KindInstance, "", "i-f", res.Operation)
	if lo.State != engine.OpFailed || !strings.Contains(lo.Description, "provisioning the backing instance failed") {
		t.Fatalf("first provision ended %+v, want failed with the upstream's description (seed no longer fails it?)", lo)
	}
	res, err = e.eng.Provision(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if lo := e.waitOp(engine.KindInstance, "", "i-f", res.Operation); lo.State != engine.OpSucceeded {
		t.Fatalf("provision sent again ended %+v", lo)
	}
	if in := e.ib.State().Instances["i-f"]; !in.Exists || in.State != "ready" || in.Creates != 2 || in.Deletes != 1 {
		t.Fatalf("upstream instance: %+v, want the failed one deleted and one live instance", in)
	}
	e.noErrorLines()
}

func TestFlakyUpstreamConverges(t *testing.T) {
	e := newEnv(t, envOpts{illArgs: []string{"-fail-rate", "0.3", "-seed", "7", "-async-delay", "50ms"}})
	ctx := context.Background()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			iid, bid := fmt.Sprintf("i-f%d", i), fmt.Sprintf("b-f%d", i)
			plan := illbroker.PlanSync
			if i%2 == 1 {
				plan = illbroker.PlanAsync
			}
			steps := []func() error{
				func() error { _, err := e.eng.Provision(ctx, provision(iid, plan, false, "")); return err },
				func() error {
					_, err := e.eng.Bind(ctx, engine.BindRequest{InstanceID: iid, BindingID: bid, ServiceID: illbroker.ServiceID, PlanID: plan})
					return err
				},
				func() error {
					_, err := e.eng.Deprovision(ctx, engine.DeprovisionRequest{InstanceID: iid, ServiceID: illbroker.ServiceID, PlanID: plan})
					return err
				},
			}
			for _, s := range steps {
				if err := s(); err != nil {
					t.Errorf("%s: %v", iid, err)
					failures.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := e.ib.State()
	for i := range 6 {
		in, bs := st.Instances[fmt.Sprintf("i-f%d", i)], st.Bindings[fmt.Sprintf("b-f%d", i)]
		if in == nil || bs == nil || in.Creates != 1 || in.Deletes != 1 || in.Exists || bs.Creates != 1 || bs.Deletes != 1 || bs.Exists {
			t.Errorf("upstream %d: instance %+v, binding %+v; want one create and one delete each", i, in, bs)
		}
	}
	if st.Failures["503-before"]+st.Failures["500-after"]+st.Failures["drop-after"] == 0 {
		t.Error("the ill broker injected no failure")
	}
	t.Logf("failures injected: %v", st.Failures)
}
