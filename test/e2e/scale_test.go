package e2e

import (
	"database/sql"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// Issue 17's target 4: the broker on its embedded defaults at many
// instances. TestScale runs the path at a size CI can afford and checks
// what must hold at any size; BenchmarkScale runs it at -scale and
// reports the figures (make bench-scale: 100,000).
var (
	scaleInstances   = flag.Int("scale", 10000, "instances BenchmarkScale provisions and binds, one binding each")
	scaleTest        = flag.Int("scale-test", 2000, "instances TestScale provisions and binds (200 with -short)")
	scaleConcurrency = flag.Int("scale-concurrency", 8, "clients provisioning and binding at once in the scale runs")
	scaleStore       = flag.String("scale-store", "sqlite", "state store of the scale runs: sqlite (in the data dir) or postgres (hack/with-test-servers.sh)")
	scaleProfile     = flag.String("scale-profile", "", "folder for the broker's profiles (through --pprof-listen): the heap after the load, and the CPU of the restart's first 5 s")
	scaleKeep        = flag.String("scale-keep", "", "where to move the broker's data dir after the run (a path that does not exist, on the temporary folder's file system), to audit or serve it again")
)

// scaleResult is what one scale run measured.
type scaleResult struct {
	n, users int
	load     time.Duration   // provisioning and binding all n
	lat      []time.Duration // provision + bind of instance i, by i
	cpu      time.Duration   // the broker's CPU (user + system) during the load
	// cpuTenth[k] is the broker's CPU while the (k+1)th tenth of the
	// instances completed: less moved by other work on the machine than
	// latency, so growth with the count shows in it too.
	cpuTenth [10]time.Duration

	mem, memRestart harness.Memory // after the load; after a restart, ready
	readyz          time.Duration  // median /readyz, after the load
	readyzRestart   time.Duration  // median /readyz, after the restart
	stop, restart   time.Duration  // SIGTERM to exit; exec to first /readyz 200
	killRestart     time.Duration  // exec to first /readyz 200 after a kill -9

	parts map[string]diskUse // the data dir's top-level entries
	audit harness.AuditRun
}

// diskUse is a tree's size: the bytes of its files (apparent) and the
// blocks the file system gave it, directories included (allocated).
type diskUse struct{ apparent, allocated int64 }

func (r scaleResult) total() diskUse {
	var t diskUse
	for _, u := range r.parts {
		t.apparent += u.apparent
		t.allocated += u.allocated
	}
	return t
}

// latency returns the median and the 90th percentile of provision + bind
// over instances [from, to).
func (r scaleResult) latency(from, to int) (p50, p90 time.Duration) {
	s := slices.Clone(r.lat[from:to])
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*9/10]
}

func (r scaleResult) tenth() int { return max(1, r.n/10) }

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// report writes the figures, one line each, and a line per tenth of the
// load with its median, where growth would show.
func (r scaleResult) report(w io.Writer) {
	first50, first90 := r.latency(0, r.tenth())
	last50, last90 := r.latency(r.n-r.tenth(), r.n)
	fmt.Fprintf(w, "scale: %d instances, %d bindings, %d IAM users, store %s, %d clients\n", r.n, r.n, r.users, *scaleStore, *scaleConcurrency)
	fmt.Fprintf(w, "  load: %.1f s (%.0f provision+bind/s), broker CPU %.2f ms per instance\n",
		r.load.Seconds(), float64(r.n)/r.load.Seconds(), ms(r.cpu)/float64(r.n))
	fmt.Fprintf(w, "  provision+bind: first tenth p50 %.1f ms p90 %.1f ms; last tenth p50 %.1f ms p90 %.1f ms; last/first p50 %.2fx\n",
		ms(first50), ms(first90), ms(last50), ms(last90), float64(last50)/float64(first50))
	var tenths []string
	for i := 0; i < 10 && r.n >= 10; i++ {
		p50, _ := r.latency(i*r.n/10, (i+1)*r.n/10)
		tenths = append(tenths, fmt.Sprintf("%.1f", ms(p50)))
	}
	fmt.Fprintf(w, "  p50 per tenth (ms): %s\n", strings.Join(tenths, " "))
	var cpus []string
	for _, c := range r.cpuTenth {
		if r.n >= 10 {
			cpus = append(cpus, fmt.Sprintf("%.1f", ms(c)/float64(r.n/10)))
		}
	}
	fmt.Fprintf(w, "  broker CPU per instance per tenth (ms): %s\n", strings.Join(cpus, " "))
	fmt.Fprintf(w, "  RSS after load %.1f MiB (peak %.1f MiB); after restart %.1f MiB\n", mib(r.mem.RSS), mib(r.mem.PeakRSS), mib(r.memRestart.RSS))
	fmt.Fprintf(w, "  /readyz p50 %.2f ms after load, %.2f ms after restart\n", ms(r.readyz), ms(r.readyzRestart))
	fmt.Fprintf(w, "  stop %.2f s, restart to ready %.2f s; after a kill -9 %.2f s\n", r.stop.Seconds(), r.restart.Seconds(), r.killRestart.Seconds())
	t := r.total()
	fmt.Fprintf(w, "  data dir: %.1f MiB apparent, %.1f MiB allocated: %.0f / %.0f bytes per instance\n",
		mib(t.apparent), mib(t.allocated), float64(t.apparent)/float64(r.n), float64(t.allocated)/float64(r.n))
	names := make([]string, 0, len(r.parts))
	for name := range r.parts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		u := r.parts[name]
		fmt.Fprintf(w, "    %-16s %10d apparent %10d allocated (%.0f / %.0f per instance)\n", name, u.apparent, u.allocated,
			float64(u.apparent)/float64(r.n), float64(u.allocated)/float64(r.n))
	}
	if iam := r.parts["s3/iam"]; r.users > 0 {
		fmt.Fprintf(w, "  IAM per user: %.0f bytes apparent, %.0f allocated\n", float64(iam.apparent)/float64(r.users), float64(iam.allocated)/float64(r.users))
	}
	fmt.Fprintf(w, "  admin audit: exit %d in %.2f s (%.0f instances/s), peak RSS %.1f MiB\n",
		r.audit.Code, r.audit.Took.Seconds(), float64(r.n)/r.audit.Took.Seconds(), mib(r.audit.PeakRSS))
}

// runScale provisions and binds n instances on a fresh broker (embedded
// S3 + IAM server; the store -scale-store names), measures it loaded,
// restarts it, checks that the state survived, and audits it. Anything
// but the expected answer fails tb.
func runScale(tb testing.TB, n int) scaleResult {
	b := harness.New(tb, binary)
	switch *scaleStore {
	case "sqlite":
	case "postgres":
		b.Args = append(b.Args, "--store", harness.PostgresSchema(tb))
	default:
		tb.Fatalf("-scale-store %q: want sqlite or postgres", *scaleStore)
	}
	var pprof string
	if *scaleProfile != "" {
		pprof = harness.FreeAddr(tb)
		b.Args = append(b.Args, "--pprof-listen", pprof)
	}
	b.Start()
	r := scaleResult{n: n, lat: make([]time.Duration, n)}

	cpu0 := procCPU(tb, b.Pid())
	var next, done atomic.Int64
	var cpuMu sync.Mutex
	cpuAt := [11]time.Duration{0: cpu0} // at each tenth's end
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	progress := max(n/10, 1)
	for range max(*scaleConcurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if p := b.Do("PUT", scaleInstance(i), harness.ProvisionBody); p.Err != nil || p.Code != http.StatusCreated {
					failed.Store(true)
					tb.Errorf("provision %d: %s, want 201", i, p)
					return
				}
				if bd := b.Do("PUT", scaleBinding(i), harness.BindBody); bd.Err != nil || bd.Code != http.StatusCreated || bd.Creds() == nil {
					failed.Store(true)
					tb.Errorf("bind %d: %s, want 201 with credentials", i, bd)
					return
				}
				r.lat[i] = time.Since(t0)
				if d := int(done.Add(1)); n >= 10 && d%(n/10) == 0 && d/(n/10) <= 10 {
					if c, err := readCPU(b.Pid()); err == nil {
						cpuMu.Lock()
						cpuAt[d/(n/10)] = c
						cpuMu.Unlock()
					}
				}
				if n >= 10000 && (i+1)%progress == 0 {
					fmt.Fprintf(os.Stderr, "scale: %d of %d at %s\n", i+1, n, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	r.load = time.Since(start)
	r.cpu = procCPU(tb, b.Pid()) - cpu0
	for k := range r.cpuTenth {
		if cpuAt[k] > 0 && cpuAt[k+1] > 0 {
			r.cpuTenth[k] = cpuAt[k+1] - cpuAt[k]
		}
	}
	var err error
	if r.mem, err = harness.ProcMemory(b.Pid()); err != nil {
		tb.Fatal(err)
	}
	r.readyz = readyzMedian(tb, b)
	if pprof != "" {
		fetchProfile(tb, "http://"+pprof+"/debug/pprof/heap", filepath.Join(*scaleProfile, "heap-loaded.prof"))
	}

	t0 := time.Now()
	b.Stop()
	r.stop = time.Since(t0)
	r.parts = dataDirUse(tb, b.DataDir)
	r.users = iamUsers(tb, b.DataDir)
	var profiled chan struct{}
	if pprof != "" {
		// The profile server starts before anything else in serve: poll it
		// from before the process starts, so the profile covers start-up.
		profiled = make(chan struct{})
		go func() {
			defer close(profiled)
			for range 2000 {
				if fetchProfile(nil, "http://"+pprof+"/debug/pprof/profile?seconds=5", filepath.Join(*scaleProfile, "restart-cpu.prof")) {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	r.restart = restartToReady(tb, b)
	if profiled != nil {
		<-profiled
	}
	if r.memRestart, err = harness.ProcMemory(b.Pid()); err != nil {
		tb.Fatal(err)
	}
	r.readyzRestart = readyzMedian(tb, b)

	// The state survived: a replay of the first and the last is answered
	// from the record, and a new instance is made.
	for _, i := range []int{0, n - 1} {
		if p := b.Do("PUT", scaleInstance(i), harness.ProvisionBody); p.Code != http.StatusOK {
			tb.Fatalf("replay of provision %d after the restart: %s, want 200", i, p)
		}
		if bd := b.Do("PUT", scaleBinding(i), harness.BindBody); bd.Code != http.StatusOK || bd.Creds() == nil {
			tb.Fatalf("replay of bind %d after the restart: %s, want 200 with credentials", i, bd)
		}
	}
	if p := b.Do("PUT", scaleInstance(n), harness.ProvisionBody); p.Code != http.StatusCreated {
		tb.Fatalf("provision after the restart: %s, want 201", p)
	}

	// A start after a kill -9 has no clean-stop marker to go by: it must
	// be ready as fast, and keep the instance made just before the kill.
	b.Kill()
	r.killRestart = restartToReady(tb, b)
	if p := b.Do("PUT", scaleInstance(n), harness.ProvisionBody); p.Code != http.StatusOK {
		tb.Fatalf("replay of the last provision after a kill -9 and a start: %s, want 200", p)
	}
	b.Stop()

	if pprof != "" { // serve's flag, not admin audit's
		b.Args = slices.DeleteFunc(b.Args, func(a string) bool { return a == "--pprof-listen" || a == pprof })
	}
	if r.audit, err = b.AuditMeasured(); err != nil {
		tb.Fatal(err)
	}
	if r.audit.Code != 0 {
		tb.Fatalf("admin audit at %d instances: exit %d, want 0 (no drift):\n%s", n, r.audit.Code, harness.Tail(r.audit.Output, 4000))
	}
	if *scaleKeep != "" {
		if err := os.Rename(b.DataDir, *scaleKeep); err != nil {
			tb.Fatalf("-scale-keep: %v", err)
		}
	}
	return r
}

// fetchProfile writes what url answers to file and tells whether it did;
// a request that finds nothing listening returns false, any other failure
// fails tb (when tb is nil, it returns false too).
func fetchProfile(tb testing.TB, url, file string) bool {
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		if tb != nil {
			tb.Fatal(err)
		}
		return false
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		if tb != nil {
			tb.Fatal(err)
		}
		return false
	}
	return true
}

func scaleInstance(i int) string { return fmt.Sprintf("/v2/service_instances/scale-%07d", i) }

func scaleBinding(i int) string {
	return fmt.Sprintf("/v2/service_instances/scale-%07d/service_bindings/scale-%07d-b", i, i)
}

// procCPU returns the user + system CPU time pid has used, from
// /proc/PID/stat (in clock ticks of 10 ms, USER_HZ on Linux).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	d, err := readCPU(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// readCPU is procCPU for goroutines other than the test's.
func readCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is the first, utime the 12th, stime the 13th.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("read %d's CPU: %d fields in /proc/PID/stat", pid, len(f))
	}
	var utime, stime int64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, fmt.Errorf("read %d's CPU: utime: %w", pid, err)
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, fmt.Errorf("read %d's CPU: stime: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

var probeClient = &http.Client{Timeout: 10 * time.Second}

// readyzMedian calls /readyz 21 times, one after the other, and returns the
// median time to its 200.
func readyzMedian(tb testing.TB, b *harness.Broker) time.Duration {
	tb.Helper()
	var took []time.Duration
	for range 21 {
		t0 := time.Now()
		resp, err := probeClient.Get(b.URL() + "/readyz")
		if err != nil {
			tb.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("/readyz = %d, want 200", resp.StatusCode)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// restartToReady starts the stopped broker and returns the time from the
// start to the first /readyz answered 200, polled every 5 ms from before
// the process is started.
func restartToReady(tb testing.TB, b *harness.Broker) time.Duration {
	tb.Helper()
	stop := make(chan struct{})
	ready := make(chan time.Time, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := probeClient.Get(b.URL() + "/readyz"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready <- time.Now()
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer close(stop)
	t0 := time.Now()
	b.Start()
	select {
	case at := <-ready:
		return at.Sub(t0)
	case <-time.After(5 * time.Minute):
		tb.Fatal("/readyz not 200 within 5 minutes of the restart")
		return 0
	}
}

// dataDirUse sums the data dir's sizes by its top-level entries.
func dataDirUse(tb testing.TB, dir string) map[string]diskUse {
	tb.Helper()
	parts := map[string]diskUse{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		// The embedded server's part (DataDir/s3, see internal/storage) by
		// its own top-level folders: objects, versions, iam, run.
		top, rest, _ := strings.Cut(rel, string(filepath.Separator))
		if top == "s3" && rest != "" {
			sub, _, _ := strings.Cut(rest, string(filepath.Separator))
			top += "/" + sub
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		u := parts[top]
		if !d.IsDir() {
			u.apparent += st.Size
		}
		u.allocated += st.Blocks * 512
		parts[top] = u
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return parts
}

// iamUsers counts the embedded IAM server's users (the rows of its users
// database, DataDir/s3/iam/users.db, see internal/s3gateway), the server
// stopped.
func iamUsers(tb testing.TB, dir string) int {
	tb.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "s3", "iam", "users.db")+"?_pragma=query_only(1)")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM users`).Scan(&n); err != nil {
		tb.Fatalf("count the embedded server's IAM users: %v", err)
	}
	return n
}

// TestScale runs the scale path at a size CI affords (-scale-test, 2,000):
// every provision and bind answered 201, /readyz 200 under the load and
// after a restart, the records kept (replays answered 200), and admin audit
// finds no drift. It asserts no times; it logs the figures
// BenchmarkScale reports.
func TestScale(t *testing.T) {
	n := *scaleTest
	if testing.Short() {
		n = min(n, 200)
	}
	r := runScale(t, n)
	if r.users != n {
		t.Errorf("IAM users = %d, want %d (one per binding)", r.users, n)
	}
	var sb strings.Builder
	r.report(&sb)
	t.Log("\n" + sb.String())
}

// BenchmarkScale provisions and binds -scale instances (one binding each;
// make bench-scale: 100,000) and reports issue 17's target 4 figures. It
// runs the load once whatever b.N is: run it with -benchtime 1x.
func BenchmarkScale(b *testing.B) {
	r := runScale(b, *scaleInstances)
	r.report(os.Stdout) // b.Log would be cut to its first lines without -v
	first, _ := r.latency(0, r.tenth())
	last, _ := r.latency(r.n-r.tenth(), r.n)
	t := r.total()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(first), "first-tenth-p50-ms")
	b.ReportMetric(ms(last), "last-tenth-p50-ms")
	b.ReportMetric(float64(last)/float64(first), "last/first-p50")
	b.ReportMetric(ms(r.cpu)/float64(r.n), "broker-cpu-ms/instance")
	if r.cpuTenth[0] > 0 {
		b.ReportMetric(float64(r.cpuTenth[9])/float64(r.cpuTenth[0]), "last/first-cpu")
	}
	b.ReportMetric(mib(r.mem.RSS), "rss-MiB")
	b.ReportMetric(mib(r.memRestart.RSS), "restart-rss-MiB")
	b.ReportMetric(r.restart.Seconds(), "restart-ready-s")
	b.ReportMetric(r.killRestart.Seconds(), "kill-restart-ready-s")
	b.ReportMetric(ms(r.readyz), "readyz-ms")
	b.ReportMetric(float64(t.allocated)/float64(r.n), "disk-B/instance")
	if r.users > 0 {
		b.ReportMetric(float64(r.parts["s3/iam"].allocated)/float64(r.users), "iam-disk-B/user")
		b.ReportMetric(float64(r.parts["s3/iam"].apparent)/float64(r.users), "iam-B/user")
	}
	b.ReportMetric(float64(r.n)/r.audit.Took.Seconds(), "audit-instances/s")
	b.ReportMetric(mib(r.audit.PeakRSS), "audit-peak-rss-MiB")
}
