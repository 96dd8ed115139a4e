package engine_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketbroker/bucketbroker/internal/bucket"
	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osb"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/store/postgres"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	testharness "github.com/bucketbroker/bucketbroker/test/harness"
)

// The embedded S3 + IAM server is one per process: every test shares it and
// keeps apart by a name prefix of its own.
var gw *s3gateway.Server

const (
	rootAK = "ROOTACCESSKEYTEST001"
	rootSK = "rootsecretkeyfortheengineteststhatislong"

	serviceID   = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	planStd     = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	planRO      = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b12"
	planAsync   = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b13"
	planVer     = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b14"
	brokerUser  = "broker"
	brokerPass  = "test-password"
	apiVersion  = "2.17"
	instancePth = "/v2/service_instances/"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "engine-test-")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	gw, err = s3gateway.Start(ctx, s3gateway.Config{DataDir: dir, RootAccessKey: rootAK, RootSecretKey: rootSK})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded S3 server:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = gw.Stop(ctx)
	os.RemoveAll(dir)
	os.Exit(code)
}

var prefixSeq atomic.Int64

// hookDriver wraps the real driver so that a test can hold a call (to see
// an operation in progress) or fail it (to see a retry or a failure).
type hookDriver struct {
	driver.Driver
	mu     sync.Mutex
	before map[string]func(ctx context.Context) error
	calls  map[string]int
	// active counts the calls in progress, peak the most at once.
	active, peak atomic.Int64
	// late makes EnsureCredential carry out its call even when the
	// caller has given up on it, as a paused process or a server that
	// holds requests would.
	late atomic.Bool
}

// enter counts a call in progress until the returned func is called.
func (d *hookDriver) enter() func() {
	n := d.active.Add(1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { d.active.Add(-1) }
}

func (d *hookDriver) hook(method string, f func(ctx context.Context) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.before[method] = f
}

func (d *hookDriver) call(ctx context.Context, method string) error {
	d.mu.Lock()
	d.calls[method]++
	f := d.before[method]
	d.mu.Unlock()
	if f != nil {
		return f(ctx)
	}
	return nil
}

func (d *hookDriver) count(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

func (d *hookDriver) Observe(ctx context.Context, r driver.ObserveRequest) (driver.Observation, error) {
	defer d.enter()()
	if err := d.call(ctx, "Observe"); err != nil {
		return driver.Observation{}, err
	}
	return d.Driver.Observe(ctx, r)
}

func (d *hookDriver) EnsureBucket(ctx context.Context, s driver.BucketSpec) error {
	defer d.enter()()
	if err := d.call(ctx, "EnsureBucket"); err != nil {
		return err
	}
	if err := d.Driver.EnsureBucket(ctx, s); err != nil {
		return err
	}
	return d.call(ctx, "EnsureBucket/after")
}

func (d *hookDriver) DeleteBucket(ctx context.Context, name, owner string, purge bool) error {
	defer d.enter()()
	if err := d.call(ctx, "DeleteBucket"); err != nil {
		return err
	}
	return d.Driver.DeleteBucket(ctx, name, owner, purge)
}

func (d *hookDriver) EnsureCredential(ctx context.Context, s driver.CredentialSpec) (driver.Credential, error) {
	defer d.enter()()
	if err := d.call(ctx, "EnsureCredential"); err != nil {
		return driver.Credential{}, err
	}
	if d.late.Load() {
		ctx = context.WithoutCancel(ctx)
	}
	c, err := d.Driver.EnsureCredential(ctx, s)
	if err != nil {
		return c, err
	}
	return c, d.call(ctx, "EnsureCredential/after")
}

func (d *hookDriver) Inventory(ctx context.Context, prefix string) (driver.Inventory, error) {
	return d.Driver.(driver.Auditable).Inventory(ctx, prefix)
}

func (d *hookDriver) DeleteAccessKey(ctx context.Context, user, owner, keyID string) error {
	defer d.enter()()
	if err := d.call(ctx, "DeleteAccessKey"); err != nil {
		return err
	}
	return d.Driver.(driver.Auditable).DeleteAccessKey(ctx, user, owner, keyID)
}

// AtomicUserMarks passes on the real driver's answer: the engine asks for
// it (ensure.UserLookNeeded), and a wrapper without it would hide it.
func (d *hookDriver) AtomicUserMarks() bool {
	m, ok := d.Driver.(driver.AtomicUserMarker)
	return ok && m.AtomicUserMarks()
}

func (d *hookDriver) RevokeCredential(ctx context.Context, user, owner string) error {
	defer d.enter()()
	if err := d.call(ctx, "RevokeCredential"); err != nil {
		return err
	}
	return d.Driver.RevokeCredential(ctx, user, owner)
}

// gate holds calls until it is opened.
type gate struct {
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 100), open: make(chan struct{})} }

func (g *gate) hold(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the driver call was never made")
	}
}

type harness struct {
	t      testing.TB
	url    string
	prefix string
	store  testStore
	eng    *engine.Engine
	drv    *hookDriver
	s3     *s3.Client
	iam    *iam.Client
	srv    *httptest.Server
	// statePath, dsn and key let a peer replica share the state and
	// secrets.
	statePath string
	dsn       string
	key       []byte
	// reg holds the engine's metrics.
	reg *prometheus.Registry
}

type harnessOpts struct {
	syncTimeout  time.Duration
	asyncTimeout time.Duration
	// peer makes the harness a second replica: same state file, same
	// backend prefix and encryption key, its own engine and HTTP server.
	peer     *harness
	replica  string
	leaseTTL time.Duration
	// postgres puts the state in a fresh schema of the PostgreSQL server
	// named by BUCKETBROKER_TEST_POSTGRES_DSN instead of a SQLite file.
	postgres bool
	// backendLatency is waited before each request to the S3 and IAM
	// endpoints, by the driver and by the harness's own clients alike: a
	// backend as far away as a cloud region's, on loopback.
	backendLatency time.Duration
	// calls, when set, records every request to the S3 and IAM endpoints,
	// the driver's and the harness's own clients' alike (after
	// backendLatency).
	calls *testharness.Calls
	// writes, when set, counts the record writes (Insert and Update, each
	// a commit) the engine makes; reads, the record reads (Get).
	writes, reads *atomic.Int64
	// transport, when set, carries every request to the S3 and IAM
	// endpoints instead (backendLatency and calls are then not used).
	transport http.RoundTripper
	// workers and callTimeout are the engine's options of those names.
	workers     int
	callTimeout time.Duration
	// noStart leaves the engine unstarted: the test calls Start.
	noStart bool
	// syncBudget is the engine's SyncBudget.
	syncBudget time.Duration
	// catalog replaces the built-in catalog (a restart with a changed
	// catalog, as a peer).
	catalog *catalog.Catalog
	// wrap, when set, puts a store of the test's around the real one.
	wrap func(testStore) testStore
}

func newHarness(t testing.TB, opts ...harnessOpts) *harness {
	t.Helper()
	var o harnessOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx := context.Background()
	statePath := filepath.Join(t.TempDir(), "state.db")
	if o.peer != nil {
		statePath = o.peer.statePath
	}
	var store testStore
	var err error
	dsn := ""
	if o.postgres {
		if o.peer != nil {
			dsn = o.peer.dsn
		} else {
			dsn = testharness.PostgresSchema(t)
		}
		store, err = postgres.Open(ctx, dsn)
	} else {
		store, err = sqlite.Open(ctx, statePath)
	}
	if err != nil {
		t.Fatal(err)
	}
	if o.writes != nil || o.reads != nil {
		store = countedStore{testStore: store, writes: o.writes, reads: o.reads}
	}
	if o.wrap != nil {
		store = o.wrap(store)
	}
	s3drv, err := s3iam.New(s3iam.Config{S3Endpoint: gw.S3Endpoint(), IAMEndpoint: gw.IAMEndpoint(), Region: gw.Region(),
		PathStyle: true, AccessKeyID: rootAK, SecretAccessKey: rootSK, HTTPClient: backendClient(o)})
	if err != nil {
		t.Fatal(err)
	}
	drv := &hookDriver{Driver: s3drv, before: map[string]func(context.Context) error{}, calls: map[string]int{}}
	key := make([]byte, secretbox.KeySize)
	_, _ = rand.Read(key)
	prefix := fmt.Sprintf("t%d", prefixSeq.Add(1))
	if o.peer != nil {
		key, prefix = o.peer.key, o.peer.prefix
	}
	box, _ := secretbox.New(key)
	cat := catalog.Default()
	if o.catalog != nil {
		cat = o.catalog
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	bb, err := bucket.New(bucket.Options{Driver: drv, Catalog: cat, Prefix: prefix,
		Endpoint: bucket.Endpoint{URL: gw.S3Endpoint(), Region: gw.Region(), PathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{
		Store: store, Backends: []engine.Backend{bb}, Catalog: cat, Box: box, Logger: log,
		SyncTimeout:  o.syncTimeout,
		SyncBudget:   o.syncBudget,
		AsyncTimeout: o.asyncTimeout,
		ReplicaID:    o.replica,
		LeaseTTL:     o.leaseTTL,
		Workers:      o.workers,
		CallTimeout:  o.callTimeout,
		Registerer:   reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !o.noStart {
		if err := eng.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	served, _ := cat.JSON()
	h, err := osb.NewHandler(osb.Options{Instances: eng, Bindings: eng, Catalog: served,
		Username: brokerUser, Password: brokerPass, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	hs := &harness{t: t, url: srv.URL, prefix: prefix, store: store, eng: eng, drv: drv, srv: srv, statePath: statePath, dsn: dsn, key: key, reg: reg,
		s3: s3Client(rootAK, rootSK, backendClient(o)), iam: iamClient(backendClient(o))}
	t.Cleanup(func() {
		srv.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
		_ = store.Close()
	})
	return hs
}

// backendClient is the HTTP client to the S3 and IAM endpoints that o asks
// for: nil (the SDK's own) unless it sets transport, backendLatency or
// calls.
func backendClient(o harnessOpts) *http.Client {
	if o.transport != nil {
		return &http.Client{Transport: o.transport}
	}
	if o.calls != nil {
		return o.calls.Client(o.backendLatency)
	}
	return testharness.DelayedHTTPClient(o.backendLatency)
}

// s3Client and iamClient reach the embedded server through hc (nil: the
// SDK's default client), with the fix of internal/sdkhttp.
func s3Client(ak, sk string, hc *http.Client) *s3.Client {
	o := s3.Options{Region: gw.Region(), BaseEndpoint: aws.String(gw.S3Endpoint()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, "")}
	o.HTTPClient = sdkhttp.Client(hc)
	return s3.New(o)
}

func iamClient(hc *http.Client) *iam.Client {
	o := iam.Options{Region: gw.Region(), BaseEndpoint: aws.String(gw.IAMEndpoint()),
		Credentials: credentials.NewStaticCredentialsProvider(rootAK, rootSK, "")}
	o.HTTPClient = sdkhttp.Client(hc)
	return iam.New(o)
}

// testClient bounds every request, so that a hang is a failure that names
// the request rather than a test binary killed by its timeout.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// reply is an OSB answer.
type reply struct {
	code int
	body map[string]any
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

func (r reply) creds() map[string]any { m, _ := r.body["credentials"].(map[string]any); return m }

func (h *harness) do(method, path string, body any) reply {
	h.t.Helper()
	r, err := h.doErr(method, path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// doQuiet is do for other goroutines than the test's: a failed request
// is a reply with code 0 and the error under "error".
func (h *harness) doQuiet(method, path string, body any) reply {
	r, err := h.doErr(method, path, body)
	if err != nil {
		return reply{body: map[string]any{"error": err.Error()}}
	}
	return r
}

func (h *harness) doErr(method, path string, body any) (reply, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.url+path, rd)
	req.SetBasicAuth(brokerUser, brokerPass)
	req.Header.Set("X-Broker-API-Version", apiVersion)
	req.Header.Set("Content-Type", "application/json")
	resp, err := testClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, body: map[string]any{}}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r.body); err != nil {
			return r, fmt.Errorf("%s %s: answer is not JSON: %q", method, path, data)
		}
	}
	return r, nil
}

func provisionBody(plan string, params map[string]any) map[string]any {
	b := map[string]any{"service_id": serviceID, "plan_id": plan, "organization_guid": "org", "space_guid": "space"}
	if params != nil {
		b["parameters"] = params
	}
	return b
}

func bindBody(plan string, params map[string]any) map[string]any {
	b := map[string]any{"service_id": serviceID, "plan_id": plan, "app_guid": "app"}
	if params != nil {
		b["parameters"] = params
	}
	return b
}

func async(path string) string { return path + "?accepts_incomplete=true" }

func del(path, plan string, async bool) string {
	return fmt.Sprintf("%s?service_id=%s&plan_id=%s&accepts_incomplete=%v", path, serviceID, plan, async)
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitOp polls last_operation until the operation ends, and returns its
// final state.
func (h *harness) waitOp(path, op string) string {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := h.do("GET", path+"/last_operation?operation="+op, nil)
		if r.code == http.StatusGone {
			return "gone"
		}
		if r.code != http.StatusOK {
			h.t.Fatalf("last_operation %s: %d %v", path, r.code, r.body)
		}
		if s := r.str("state"); s != "in progress" {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatalf("operation %s of %s still in progress after 30s", op, path)
	return ""
}

func (h *harness) want(r reply, code int, what string) reply {
	h.t.Helper()
	if r.code != code {
		h.t.Fatalf("%s: got %d %v, want %d", what, r.code, r.body, code)
	}
	return r
}

// buckets lists the backend buckets of this harness (by name prefix).
func (h *harness) buckets() []string {
	h.t.Helper()
	var all []s3types.Bucket
	pages := s3.NewListBucketsPaginator(h.s3, &s3.ListBucketsInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		all = append(all, page.Buckets...)
	}
	var names []string
	for _, b := range all {
		if strings.HasPrefix(aws.ToString(b.Name), h.prefix+"-") {
			names = append(names, aws.ToString(b.Name))
		}
	}
	return names
}

// bucketExists reports whether the backend has the bucket.
func (h *harness) bucketExists(name string) bool {
	_, err := h.s3.HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String(name)})
	return err == nil
}

// users lists the backend users of this harness with their key ids.
func (h *harness) users() map[string][]string {
	h.t.Helper()
	ctx := context.Background()
	var all []iamtypes.User
	pages := iam.NewListUsersPaginator(h.iam, &iam.ListUsersInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		all = append(all, page.Users...)
	}
	users := map[string][]string{}
	for _, u := range all {
		name := aws.ToString(u.UserName)
		if !strings.HasPrefix(name, h.prefix+"-") {
			continue
		}
		keys, err := h.iam.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: u.UserName})
		if err != nil {
			h.t.Fatal(err)
		}
		users[name] = []string{}
		for _, k := range keys.AccessKeyMetadata {
			users[name] = append(users[name], aws.ToString(k.AccessKeyId))
		}
	}
	return users
}

// canWrite reports whether the credentials can put and get an object in
// bucket.
func canWrite(ak, sk, bucket string) error {
	ctx := context.Background()
	c := s3Client(ak, sk, nil)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe"), Body: strings.NewReader("x")}); err != nil {
		return err
	}
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe")})
	return err
}

type testStore interface {
	engine.Store
	Close() error
}

// countedStore counts the record writes and reads made through it (those
// whose counter is set).
type countedStore struct {
	testStore
	writes, reads *atomic.Int64
}

func count(n *atomic.Int64) {
	if n != nil {
		n.Add(1)
	}
}

func (s countedStore) Insert(ctx context.Context, r *engine.Record) error {
	count(s.writes)
	return s.testStore.Insert(ctx, r)
}

func (s countedStore) Update(ctx context.Context, r *engine.Record) error {
	count(s.writes)
	return s.testStore.Update(ctx, r)
}

func (s countedStore) Get(ctx context.Context, kind engine.Kind, id string) (*engine.Record, error) {
	count(s.reads)
	return s.testStore.Get(ctx, kind, id)
}

// metric returns the value of the engine's counter or gauge name (summed
// over its labels; 0 when it has none yet).
func (h *harness) metric(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}
