package crash

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// faultProxy is an HTTP reverse proxy in front of one backend endpoint. It
// can delay every request, and answer the first requests of each kind with
// a 5xx of its own without forwarding them, as an overloaded S3 or IAM
// service does. A kind is an API call on one resource (PUT /bucket?tagging,
// IAM CreateUser of one user), so that every operation meets its own
// faults, whatever runs beside it.
type faultProxy struct {
	iam bool // errors in the IAM (query protocol) shape, not the S3 one
	srv *httptest.Server
	rp  *httputil.ReverseProxy

	mu        sync.Mutex
	latency   time.Duration
	failFirst int
	seen      map[string][]time.Time // per kind, when each request came
	injected  int
	forwarded int
}

func newFaultProxy(t *testing.T, endpoint string, iam bool) *faultProxy {
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{iam: iam, seen: map[string][]time.Time{}}
	p.rp = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the broker signed the Host it sent to
	}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// arm sets the faults from now on and forgets what the proxy counted.
func (p *faultProxy) arm(latency time.Duration, failFirst int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency, p.failFirst = latency, failFirst
	p.seen, p.injected, p.forwarded = map[string][]time.Time{}, 0, 0
}

// counts returns how many requests came since arm, and how many of them
// were answered with a fault.
func (p *faultProxy) counts() (seen, injected int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected + p.forwarded, p.injected
}

// gaps returns, for every kind that had more than n requests since arm, the
// time between its request n and n+1 (counting from 1).
func (p *faultProxy) gaps(n int) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gaps []time.Duration
	for _, at := range p.seen {
		if len(at) > n {
			gaps = append(gaps, at[n].Sub(at[n-1]))
		}
	}
	return gaps
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, err := p.kind(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.seen[kind] = append(p.seen[kind], time.Now())
	n := len(p.seen[kind])
	fail := n <= p.failFirst
	if fail {
		p.injected++
	} else {
		p.forwarded++
	}
	latency := p.latency
	p.mu.Unlock()

	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if !fail {
		p.rp.ServeHTTP(w, r)
		return
	}
	// Both answers an overloaded service gives, in turn for each kind: its
	// first request gets 503 SlowDown.
	code, status, msg := "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."
	if n%2 == 0 {
		code, status, msg = "InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again."
	}
	var body string
	if p.iam {
		body = fmt.Sprintf(`<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Receiver</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>fault-%d</RequestId></ErrorResponse>`, code, msg, n)
	} else {
		body = fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><RequestId>fault-%d</RequestId></Error>`, code, msg, n)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// kind names a request's API call and resource: the S3 method, path and
// query keys; the IAM action and the user it acts on (the form body is read
// and put back for forwarding).
func (p *faultProxy) kind(r *http.Request) (string, error) {
	if !p.iam {
		keys := slices.Sorted(maps.Keys(r.URL.Query()))
		return r.Method + " " + r.URL.Path + "?" + strings.Join(keys, "&"), nil
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return "", err
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	form, err := url.ParseQuery(string(data))
	if err != nil {
		return "", err
	}
	return form.Get("Action") + " " + form.Get("UserName") + " " + form.Get("PolicyName"), nil
}

// TestBackendFaults runs the broker (s3iam driver) against a versitygw pair
// through two fault proxies. The same provisions and binds, sync and async,
// run on a clean backend, then on one that answers the first requests of
// every kind with 503 SlowDown or 500 InternalError: they succeed with one
// bucket and one key each, after more backend requests than the clean run
// made. Then, with every backend request slowed down, the catalog and
// last_operation answer as fast as on the clean backend, and an async
// provision answers 202 without waiting for the backend.
func TestBackendFaults(t *testing.T) {
	const (
		failFirst = 3 // one more than the SDK's own retries: the engine retries too
		latency   = time.Second
	)
	vgw := startVersitygw(t)
	direct := harness.Backend{S3: vgw.env["BUCKETBROKER_TEST_S3_ENDPOINT"], IAM: vgw.env["BUCKETBROKER_TEST_IAM_ENDPOINT"],
		AccessKey: vgw.env["BUCKETBROKER_TEST_S3_ACCESS_KEY"], SecretKey: vgw.env["BUCKETBROKER_TEST_S3_SECRET_KEY"]}
	s3p, iamp := newFaultProxy(t, direct.S3, false), newFaultProxy(t, direct.IAM, true)
	proxied := direct
	proxied.S3, proxied.IAM = s3p.srv.URL, iamp.srv.URL
	b := harness.External(t, binary, proxied)
	b.Start()
	b.Backend = direct // the test lists and uses keys on the server itself

	arm := func(latency time.Duration, failFirst int) {
		s3p.arm(latency, failFirst)
		iamp.arm(latency, failFirst)
	}
	counts := func() (seen, injected int) {
		s1, i1 := s3p.counts()
		s2, i2 := iamp.counts()
		return s1 + s2, i1 + i2
	}
	// gaps returns the times between request n and n+1 of every kind,
	// sorted.
	gaps := func(n int) []time.Duration {
		g := slices.Concat(s3p.gaps(n), iamp.gaps(n))
		slices.Sort(g)
		return g
	}

	// The clean run.
	arm(0, 0)
	start := time.Now()
	clean, _ := provisionAndBind(t, b, "clean")
	cleanSeen, _ := counts()
	t.Logf("clean backend: 4 operations in %s, %d backend requests", time.Since(start).Round(time.Millisecond), cleanSeen)

	// The same operations on a backend whose first requests of every kind fail.
	arm(0, failFirst)
	start = time.Now()
	faulty, why := provisionAndBind(t, b, "faulty")
	seen, injected := counts()
	sdk, engine := gaps(1), gaps(failFirst)
	if len(sdk) < 5 || len(engine) == 0 {
		t.Fatalf("with faults: %d kinds retried, %d after the SDK gave up; want at least 5 and 1", len(sdk), len(engine))
	}
	t.Logf("5xx on the first %d requests of every kind: 4 operations in %s, %d backend requests (%d answered 5xx by the proxy, %d forwarded; %d in the clean run)",
		failFirst, time.Since(start).Round(time.Millisecond), seen, injected, seen-injected, cleanSeen)
	t.Logf("first retry of each of %d kinds (the SDK's backoff) after %s to %s (median %s); after the SDK's last attempt, the next request of that kind came %s to %s later (the engine's backoff, and the step's earlier calls again)",
		len(sdk), sdk[0].Round(time.Millisecond), sdk[len(sdk)-1].Round(time.Millisecond), sdk[len(sdk)/2].Round(time.Millisecond),
		engine[0].Round(time.Millisecond), engine[len(engine)-1].Round(time.Millisecond))
	t.Logf("an async operation while the backend failed: %q", why)
	if injected == 0 || seen-injected < cleanSeen || seen <= cleanSeen {
		t.Errorf("with faults: %d backend requests, %d of them faults; want every fault retried: more than the %d of the clean run, and at least as many forwarded", seen, injected, cleanSeen)
	}
	if why == "" {
		t.Errorf("no last_operation of the async operations said %q while the backend failed", "backend error, retrying")
	}
	// Every kind's first request failed, so its second is a retry after a
	// backoff. Without jitter, all those backoffs would be one fixed time
	// (no latency is injected here); with full jitter they spread over
	// seconds.
	if sdk[len(sdk)-1]-sdk[0] < 100*time.Millisecond {
		t.Errorf("first retries after %v: want backoffs spread over 100ms or more (jitter)", sdk)
	}
	for _, c := range slices.Concat(clean, faulty) {
		if err := b.Backend.Works(c); err != nil {
			t.Errorf("credentials %v: %v", c["access_key_id"], err)
		}
	}
	checkBackend(t, b, []string{"clean", "clean-async", "faulty", "faulty-async"}, slices.Concat(clean, faulty)...)

	// A slow backend: every request waits a second before it is forwarded.
	inst := "/v2/service_instances/"
	arm(0, 0)
	r := b.Do("PUT", inst+"fast-async?accepts_incomplete=true", harness.ProvisionBody)
	if r.Code != http.StatusAccepted {
		t.Fatalf("async provision: %s, want 202", r)
	}
	fastAccept := r.Took
	waitState(t, b, inst+"fast-async", r.Operation(), "succeeded", replay)
	fast := latencies(t, b, lastOpPath(inst+"fast-async", r.Operation()))

	arm(latency, 0)
	r = b.Do("PUT", inst+"slow-async?accepts_incomplete=true", harness.ProvisionBody)
	if r.Code != http.StatusAccepted {
		t.Fatalf("async provision on the slow backend: %s, want 202", r)
	}
	slowAccept, op, began := r.Took, r.Operation(), time.Now()
	slow := latencies(t, b, lastOpPath(inst+"slow-async", op))
	during := b.Do("GET", lastOpPath(inst+"slow-async", op), nil).State()
	waitState(t, b, inst+"slow-async", op, "succeeded", replay)
	took := time.Since(began)
	slowSeen, _ := counts()
	t.Logf("backend slowed by %s a request: async provision took %s (%d backend requests; %s after the measurements); 202 in %s (%s unslowed); slowest catalog or last_operation answer %s (%s unslowed)",
		latency, took.Round(time.Millisecond), slowSeen, during, slowAccept.Round(10*time.Microsecond), fastAccept.Round(10*time.Microsecond),
		slow.Round(10*time.Microsecond), fast.Round(10*time.Microsecond))
	if took < 2*latency {
		t.Errorf("the provision took %s for %d backend requests slowed by %s each: the latency was not injected", took, slowSeen, latency)
	}
	// Generous bounds: any answer that waited for one backend request
	// would take the whole injected latency.
	if slowAccept >= latency/2 {
		t.Errorf("async provision answered 202 in %s on a backend slowed by %s a request (%s unslowed), want under %s", slowAccept, latency, fastAccept, latency/2)
	}
	if slow >= latency/2 {
		t.Errorf("slowest catalog or last_operation answer %s on a backend slowed by %s a request (%s unslowed), want under %s", slow, latency, fast, latency/2)
	}
	arm(0, 0)
	checkBackend(t, b, []string{"clean", "clean-async", "faulty", "faulty-async", "fast-async", "slow-async"}, slices.Concat(clean, faulty)...)

	rr := &run{t: t, b: b, out: converged}
	rr.noneInProgress()
	if !rr.ok() {
		t.Errorf("after the faults: %v", rr.notes)
	}
}

// provisionAndBind provisions instance id synchronously and id-async
// asynchronously, at once, then binds each the same way, and returns the
// two bindings' credentials, and the first last_operation description of
// the async ones that said they retry a backend error.
func provisionAndBind(t *testing.T, b *harness.Broker, id string) (creds []map[string]any, retrying string) {
	t.Helper()
	inst := "/v2/service_instances/"
	paths := [][2]string{
		{inst + id, inst + id + "-async"},
		{inst + id + "/service_bindings/" + id + "-b", inst + id + "-async/service_bindings/" + id + "-async-b"},
	}
	for i, body := range []any{harness.ProvisionBody, harness.BindBody} {
		var wg sync.WaitGroup
		var syncReply harness.Reply
		wg.Go(func() { syncReply = b.Do("PUT", paths[i][0], body) })
		op := asyncPut(t, b, paths[i][1], body)
		deadline := time.Now().Add(replay)
		for {
			r := b.Do("GET", lastOpPath(paths[i][1], op), nil)
			if retrying == "" && strings.Contains(r.Description(), "backend error, retrying") {
				retrying = r.Description()
			}
			if r.State() == "succeeded" {
				break
			}
			if r.State() != "in progress" || time.Now().After(deadline) {
				t.Fatalf("%s: %s, want it to succeed within %s", paths[i][1], r, replay)
			}
			time.Sleep(50 * time.Millisecond)
		}
		wg.Wait()
		if syncReply.Code != http.StatusCreated {
			t.Fatalf("sync PUT %s: %s, want 201", paths[i][0], syncReply)
		}
		if i == 1 {
			creds = append(creds, syncReply.Creds(), b.Do("GET", paths[i][1], nil).Creds())
		}
	}
	return creds, retrying
}
