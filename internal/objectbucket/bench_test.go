package objectbucket

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// benchClaims is how many claims BenchmarkClaimLifecycle creates; bounded
// so that a typo cannot fill etcd.
var benchClaims = flag.Int("claims", 500, "BenchmarkClaimLifecycle: claims to create (1-5000)")

// apiServerProfile, when set, is where benchLifecycle writes a CPU profile
// of the API server taken while the claims are created and bound: the
// figures below are the API server's time, and this shows where it goes.
var apiServerProfile = flag.String("apiserver-cpuprofile", "", "BenchmarkClaimLifecycle: write CPU profiles of kube-apiserver, taken while claims bind and while they are deleted, to this file name with -bind and -delete before its extension")

// benchLatency puts the embedded server a network round trip away.
var benchLatency = flag.Duration("backend-latency", 0, "BenchmarkClaimLifecycle: wait this long before each request to the embedded S3 and IAM server, as for a backend in a cloud region (0: loopback as it is)")

// benchWorkers overrides DefaultMaxConcurrentReconciles, to measure others.
var benchWorkers = flag.Int("workers", 0, "BenchmarkClaimLifecycle: MaxConcurrentReconciles (0: the default)")

// requestCounter is a counting http.RoundTripper: the API requests the
// manager sends, by verb and resource, for the phase being measured.
type requestCounter struct {
	next  http.RoundTripper
	mu    sync.Mutex
	byKey map[string]int
	total atomic.Int64 // requests, watches excluded
	// watches counts the watch requests the informers (re)open: long-lived
	// streams that belong to the process, not to any claim, so not part of
	// the requests per claim.
	watches atomic.Int64
	busy    atomic.Int64 // nanoseconds, summed over concurrent requests (watches excluded)
}

func (c *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Method + " " + resourceOf(req.URL.Path)
	if req.URL.Query().Get("watch") == "true" {
		key = "WATCH " + resourceOf(req.URL.Path)
	}
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	c.byKey[key]++
	c.mu.Unlock()
	if strings.HasPrefix(key, "WATCH ") {
		c.watches.Add(1)
		return c.next.RoundTrip(req)
	}
	c.total.Add(1)
	start := time.Now()
	resp, err := c.next.RoundTrip(req)
	c.busy.Add(int64(time.Since(start)))
	return resp, err
}

// busyTake returns the time requests took since the last call.
func (c *requestCounter) busyTake() time.Duration { return time.Duration(c.busy.Swap(0)) }

// take returns the count since the last take and what it was made of.
func (c *requestCounter) take() (int64, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by := c.byKey
	c.byKey = nil
	return c.total.Swap(0), by
}

// resourceOf reduces an API path to its resource (and subresource):
// /api/v1/namespaces/ns/secrets/name -> secrets,
// /apis/objectbucket.io/v1alpha1/namespaces/ns/objectbucketclaims/x/status
// -> objectbucketclaims/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

func formatCounts(by map[string]int, n int) string {
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %-45s %6d  %.2f/claim", k, by[k], float64(by[k])/float64(n))
	}
	return b.String()
}

// backendCounter counts the driver calls that create something.
// and the time all driver calls took (summed over concurrent calls).
type backendCounter struct {
	driver.Driver
	buckets, credentials atomic.Int64
	busy                 atomic.Int64 // nanoseconds
}

func (d *backendCounter) timed(start time.Time) { d.busy.Add(int64(time.Since(start))) }

func (d *backendCounter) EnsureBucket(ctx context.Context, spec driver.BucketSpec) error {
	defer d.timed(time.Now())
	d.buckets.Add(1)
	return d.Driver.EnsureBucket(ctx, spec)
}

func (d *backendCounter) EnsureCredential(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	defer d.timed(time.Now())
	d.credentials.Add(1)
	return d.Driver.EnsureCredential(ctx, spec)
}

func (d *backendCounter) RevokeCredential(ctx context.Context, user, owner string) error {
	defer d.timed(time.Now())
	return d.Driver.RevokeCredential(ctx, user, owner)
}

func (d *backendCounter) DeleteBucket(ctx context.Context, name, owner string, purge bool) error {
	defer d.timed(time.Now())
	return d.Driver.DeleteBucket(ctx, name, owner, purge)
}

// busyTake returns the driver time since the last call.
func (d *backendCounter) busyTake() time.Duration { return time.Duration(d.busy.Swap(0)) }

// startBenchManager runs a manager configured as `bucketbroker controller`
// configures its own (ManagerOptions' client, the Reconciler's defaults),
// with its transport counted by rc.
func startBenchManager(b *testing.B, provisioner string, drv driver.Driver, rc *requestCounter) *controllerRun {
	b.Helper()
	cfg := rest.CopyConfig(restConfig)
	// What `bucketbroker controller` sets on its kubeconfig.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rc.next = rt; return rc })
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(provisioner),
		NewClient:              NewClient,
	})
	if err != nil {
		b.Fatalf("new manager: %v", err)
	}
	r, err := NewReconciler(mgr, drv, Options{
		ProvisionerName: provisioner, Prefix: testPrefix, BucketHost: "s3.test", BucketPort: 9000,
		Region: "us-east-1", SkipNameValidation: true, MaxConcurrentReconciles: *benchWorkers,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &controllerRun{provisioner: provisioner, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- mgr.Start(ctx) }()
	b.Cleanup(run.stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("manager cache never synced")
	}
	return run
}

// reconciles is how many passes the objectbucketclaim controllers of this
// process have run (all managers: the counter is process-wide).
func reconciles(b *testing.B) float64 {
	b.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		b.Fatalf("gather metrics: %v", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "objectbucketclaim" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// BenchmarkClaimLifecycle creates -claims claims at once on envtest with the
// embedded S3 server and reports how long until all are Bound and, after
// deleting them, until all are gone, and the API requests the controller
// sent per claim for each half. In between the manager is restarted against
// the same backend and the backend create calls it makes are counted: for
// claims already Bound the target is none.
//
//	hack/with-test-servers.sh go test -count=1 -run '^$' -bench 'ClaimLifecycle$' -benchtime 1x ./internal/objectbucket/ -claims 500
func BenchmarkClaimLifecycle(b *testing.B) {
	if k8s == nil {
		b.Skip("KUBEBUILDER_ASSETS is unset; run through hack/with-test-servers.sh")
	}
	n := *benchClaims
	if n < 1 || n > 5000 {
		b.Fatalf("-claims %d: want 1 to 5000", n)
	}
	drv := backend.drv
	if *benchLatency > 0 {
		var err error
		if drv, err = backendDriver(harness.DelayedHTTPClient(*benchLatency)); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		benchLifecycle(b, n, drv)
	}
}

// BenchmarkClaimLifecycleInstantDriver is BenchmarkClaimLifecycle with an
// in-memory driver that answers at once (memDriver) instead of the embedded
// S3 + IAM server: what is left is the controller's own cost and the API
// server's, the measure lib-bucket-provisioner's figures ("an instant fake
// driver") were taken with.
//
//	hack/with-test-servers.sh go test -count=1 -run '^$' -bench ClaimLifecycleInstantDriver -benchtime 1x ./internal/objectbucket/ -claims 500
func BenchmarkClaimLifecycleInstantDriver(b *testing.B) {
	if k8s == nil {
		b.Skip("KUBEBUILDER_ASSETS is unset; run through hack/with-test-servers.sh")
	}
	n := *benchClaims
	if n < 1 || n > 5000 {
		b.Fatalf("-claims %d: want 1 to 5000", n)
	}
	for range b.N {
		md := newMemDriver()
		benchLifecycle(b, n, md)
		if bk, us := md.size(); bk != 0 || us != 0 {
			b.Errorf("instant driver: %d buckets and %d users left after every claim was deleted", bk, us)
		}
	}
}

// benchLifecycle runs one lifecycle of n claims against drv; both managers
// (before and after the restart) share it, as they share a real backend.
func benchLifecycle(b *testing.B, n int, drv0 driver.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The benchmark's own client: not counted, and not what is measured,
	// so not rate limited.
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS = -1
	kc, err := client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "obc-bench-"}}
	if err := kc.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	claims := watchClaims(ctx, b, cfg, ns.Name)
	prov := newProvisioner()
	reclaim := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "bb-bench-"}, Provisioner: prov, ReclaimPolicy: &reclaim}
	if err := kc.Create(ctx, sc); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = kc.Delete(context.Background(), sc) }()
	class := sc.Name

	rc := &requestCounter{}
	drv := &backendCounter{Driver: drv0}
	first := startBenchManager(b, prov, drv, rc)
	rc.take() // cache start-up
	rc.busyTake()

	profiled := profileAPIServer(ctx, b, cfg, "bind")
	cpu0 := treeCPU()
	start := time.Now()
	if err := parallel(n, 16, func(i int) error {
		return kc.Create(ctx, newClaim(ns.Name, fmt.Sprintf("bench-%04d", i), class, nil))
	}); err != nil {
		b.Fatalf("create claims: %v", err)
	}
	created := time.Since(start)
	waitClaims(ctx, b, claims, "Bound", func(l *obv1.ObjectBucketClaimList) bool {
		bound := 0
		for _, c := range l.Items {
			if c.Status.Phase == obv1.PhaseBound {
				bound++
			}
		}
		return bound == n
	})
	toBound := time.Since(start)
	bindCPU := treeCPU().minus(cpu0)
	profiled()
	bindBackend := drv.busyTake()
	bindAPI := rc.busyTake()
	// Passes that the last writes trigger are part of the lifecycle.
	settle(ctx, rc)
	createReqs, createBy := rc.take()

	// Restart: a new manager on the same backend.
	first.stop()
	rc2 := &requestCounter{}
	drv2 := &backendCounter{Driver: drv0}
	before := reconciles(b)
	restartAt := time.Now()
	second := startBenchManager(b, prov, drv2, rc2)
	waitUntil(ctx, b, "the restarted manager to reconcile every claim", func() bool { return reconciles(b)-before >= float64(n) })
	restartTook := time.Since(restartAt)
	settle(ctx, rc2)
	restartReqs, restartBy := rc2.take()
	restartCreates := drv2.buckets.Load() + drv2.credentials.Load()
	rc = rc2
	rc.busyTake()

	profiled = profileAPIServer(ctx, b, cfg, "delete")
	cpu0 = treeCPU()
	start = time.Now()
	if err := kc.DeleteAllOf(ctx, &obv1.ObjectBucketClaim{}, client.InNamespace(ns.Name)); err != nil {
		b.Fatal(err)
	}
	waitClaims(ctx, b, claims, "gone", func(l *obv1.ObjectBucketClaimList) bool { return len(l.Items) == 0 })
	toDeleted := time.Since(start)
	deleteCPU := treeCPU().minus(cpu0)
	profiled()
	deleteBackend := drv2.busyTake()
	deleteAPI := rc.busyTake()
	settle(ctx, rc)
	deleteReqs, deleteBy := rc.take()
	second.stop()

	per := func(v int64) float64 { return float64(v) / float64(n) }
	b.ReportMetric(toBound.Seconds(), "s-to-bound")
	b.ReportMetric(toDeleted.Seconds(), "s-to-deleted")
	b.ReportMetric(per(createReqs+deleteReqs), "api-requests/claim")
	b.ReportMetric(per(createReqs), "create-requests/claim")
	b.ReportMetric(per(deleteReqs), "delete-requests/claim")
	b.ReportMetric(float64(restartCreates), "backend-creates-on-restart")
	msPer := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(msPer(bindCPU.total()), "cpu-ms/claim-bound")
	b.ReportMetric(msPer(deleteCPU.total()), "cpu-ms/claim-deleted")
	// The split: the API server and etcd are the same for any driver; the
	// rest (controller, embedded server, benchmark client) is this process.
	b.ReportMetric(msPer(bindCPU.children), "apiserver-cpu-ms/claim-bound")
	b.ReportMetric(msPer(deleteCPU.children), "apiserver-cpu-ms/claim-deleted")
	b.ReportMetric(0, "ns/op") // the phases above are the measure
	b.Logf("%d claims: created by the benchmark in %s, all Bound after %s, all gone %s after deletion; backend calls while binding: %d EnsureBucket, %d EnsureCredential",
		n, created.Round(time.Millisecond), toBound.Round(time.Millisecond), toDeleted.Round(time.Millisecond), drv.buckets.Load(), drv.credentials.Load())
	b.Logf("CPU used by this process and its children (kube-apiserver, etcd): %s (children %s) while binding, %s (children %s) while deleting",
		bindCPU.total().Round(time.Millisecond), bindCPU.children.Round(time.Millisecond),
		deleteCPU.total().Round(time.Millisecond), deleteCPU.children.Round(time.Millisecond))
	b.Logf("driver time summed over calls (%d in parallel at most): %s while binding, %s while deleting",
		workers(), bindBackend.Round(time.Millisecond), deleteBackend.Round(time.Millisecond))
	b.Logf("API request time summed over requests (in the transport: the client's rate limiter waits before it): %s while binding, %s while deleting",
		bindAPI.Round(time.Millisecond), deleteAPI.Round(time.Millisecond))
	b.Logf("create: %d requests (%.2f/claim; the informers' WATCH requests listed are not counted)%s", createReqs, per(createReqs), formatCounts(createBy, n))
	b.Logf("restart: every claim reconciled %s after the new manager started; %d requests; backend create calls: %d EnsureBucket, %d EnsureCredential%s",
		restartTook.Round(time.Millisecond), restartReqs, drv2.buckets.Load(), drv2.credentials.Load(), formatCounts(restartBy, n))
	b.Logf("delete: %d requests (%.2f/claim; WATCH not counted)%s", deleteReqs, per(deleteReqs), formatCounts(deleteBy, n))
}

// profileAPIServer starts a CPU profile of the API server (its
// /debug/pprof, as envtest's admin) when -apiserver-cpuprofile is set; the
// function it returns waits for the profile and writes it to the file named
// by the flag, with phase before its extension (bind, delete).
func profileAPIServer(ctx context.Context, b *testing.B, cfg *rest.Config, phase string) func() {
	if *apiServerProfile == "" {
		return func() {}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ext := filepath.Ext(*apiServerProfile)
	path := strings.TrimSuffix(*apiServerProfile, ext) + "-" + phase + ext
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/debug/pprof/profile?seconds=8", nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("kube-apiserver profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("profile the API server: %v", err)
			return
		}
		b.Logf("kube-apiserver CPU profile of the first 8 s (%s): %s", phase, path)
	}
}

func workers() int {
	if *benchWorkers > 0 {
		return *benchWorkers
	}
	return DefaultMaxConcurrentReconciles
}

// settle waits until the manager has sent no request for a second: the
// passes that its own last writes trigger count too.
func settle(ctx context.Context, rc *requestCounter) {
	last := rc.total.Load()
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		cur := rc.total.Load()
		if cur == last {
			return
		}
		last = cur
	}
}

// parallel runs f(0..n-1) on at most workers goroutines and returns the first
// error.
func parallel(n, workers int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// watchClaims returns a cache of the claims in ns, fed by a watch: the
// benchmark looks at its claims 20 times a second, and a List of 500
// claims from the API server that often would take a good part of the CPU
// the API server and the controller share with it.
func watchClaims(ctx context.Context, b *testing.B, cfg *rest.Config, ns string) cache.Cache {
	b.Helper()
	c, err := cache.New(cfg, cache.Options{Scheme: testScheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &obv1.ObjectBucketClaim{}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the benchmark's claim cache never synced")
	}
	return c
}

func waitClaims(ctx context.Context, b *testing.B, claims client.Reader, what string, done func(*obv1.ObjectBucketClaimList) bool) {
	b.Helper()
	waitUntil(ctx, b, "claims "+what, func() bool {
		var l obv1.ObjectBucketClaimList
		if err := claims.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			return false
		}
		return done(&l)
	})
}

func waitUntil(ctx context.Context, b *testing.B, what string, cond func() bool) {
	b.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		b.Fatalf("waiting for %s: %v", what, err)
	}
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuSplit is CPU time (user + system) used by this process (self) and by
// the processes it started (children).
type cpuSplit struct{ self, children time.Duration }

func (c cpuSplit) total() time.Duration { return c.self + c.children }

func (c cpuSplit) minus(d cpuSplit) cpuSplit {
	return cpuSplit{self: c.self - d.self, children: c.children - d.children}
}

// treeCPU is the CPU time (user + system) used so far by this process and
// every process it started that is still running, apart: kube-apiserver and etcd
// (envtest's children) beside the controller, the embedded S3 server and
// the benchmark's own client. On the shared 2 cores the time a phase takes
// moves with other work by tens of percent; the CPU it takes moves much
// less, and it is what the lifecycle costs the machine. Zero where /proc
// cannot be read.
func treeCPU() cpuSplit {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return cpuSplit{}
	}
	type proc struct {
		ppid int
		cpu  int64
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		// The command name (field 2) may hold spaces: the fields after
		// it start after its closing parenthesis.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		utime, err2 := strconv.ParseInt(f[11], 10, 64)
		stime, err3 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		procs[pid] = proc{ppid: ppid, cpu: utime + stime}
	}
	self := os.Getpid()
	var own, children int64
	for pid, p := range procs {
		for q, hops := pid, 0; q > 0 && hops < 64; q, hops = procs[q].ppid, hops+1 {
			if q == self {
				if pid == self {
					own += p.cpu
				} else {
					children += p.cpu
				}
				break
			}
		}
	}
	ticks := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return cpuSplit{self: ticks(own), children: ticks(children)}
}
