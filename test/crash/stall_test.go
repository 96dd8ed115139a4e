package crash

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestReplicasStalledBackend runs three replicas of the broker (the s3iam
// driver, one PostgreSQL database) against a versitygw pair of the test's
// own, under a storm of duplicate binds sent round-robin, synchronous and
// asynchronous. Meanwhile the backend's processes are stopped with SIGSTOP
// for three lease TTLs, twice, and one replica dies (exit 137, as under kill
// -9) the first time it has created a key and not yet recorded it. Every
// request is re-sent, as a platform does, until it has a final answer.
// Then: every answer of a binding carried the same credentials, and they
// work; the backend holds one user per binding with exactly that key;
// nothing is in progress; the leak audit is clean; and the replicas'
// metrics show the backend retries of the stalls and the dead replica's
// operations taken over.
func TestReplicasStalledBackend(t *testing.T) {
	const (
		ttl                = 2 * time.Second
		instances, perInst = 8, 4
		dupes              = 4
		stalls             = 2
	)
	v := startVersitygw(t)
	be := v.backend()
	be.Prefix = "st" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	dsn := harness.PostgresSchema(t)
	keyFile := filepath.Join(t.TempDir(), "encryption.key")

	var replicas []*harness.Broker
	var dead atomic.Int32
	dead.Store(-1)
	for i := range 3 {
		b := harness.External(t, binary, be)
		b.Args = append(b.Args, "--replica-id", fmt.Sprintf("replica-%d", i), "--lease-ttl", ttl.String(),
			"--encryption-key-file", keyFile)
		b.Env = append(b.Env, "BUCKETBROKER_STORE="+dsn)
		if i == 1 {
			b.Start(string(crashpoint.BindKeyCreated))
		} else {
			b.Start()
		}
		replicas = append(replicas, b)
	}
	crashed := make(chan error, 1)
	go func() {
		err := replicas[1].TryWaitCrash(2 * time.Minute)
		if err == nil {
			dead.Store(1) // the load balancer notices
		}
		crashed <- err
	}()

	// send is a platform behind a load balancer: round-robin over the
	// replicas, re-sending on a connection error or a 5xx, and re-sending
	// an async PUT after its 202 until it gets its final answer.
	var rr atomic.Int64
	send := func(method, path string, body any) harness.Reply {
		deadline := time.Now().Add(3 * time.Minute)
		var r harness.Reply
		for time.Now().Before(deadline) {
			i := int(rr.Add(1) % 3)
			if int(dead.Load()) == i {
				continue
			}
			r = replicas[i].Do(method, path, body)
			if r.Err == nil && r.Code < 500 && r.Code != http.StatusAccepted {
				return r
			}
			time.Sleep(100 * time.Millisecond)
		}
		return r
	}

	for i := range instances {
		if r := send("PUT", fmt.Sprintf("/v2/service_instances/st-%d", i), harness.ProvisionBody); r.Code != http.StatusCreated && r.Code != http.StatusOK {
			t.Fatalf("provision st-%d: %s", i, r)
		}
	}

	// The stalls: the S3 gateway and the IAM service stop answering (their
	// processes are stopped, connections stay open) for three leases.
	pids := []int{readPid(t, filepath.Join(v.dir, "s3.pid")), readPid(t, filepath.Join(v.dir, "iam.pid"))}
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil {
				t.Errorf("signal %v to versitygw %d: %v", sig, pid, err)
			}
		}
	}
	t.Cleanup(func() { signal(syscall.SIGCONT) })
	loadDone := make(chan struct{})
	stallsDone := make(chan struct{})
	go func() {
		defer close(stallsDone)
		for range stalls {
			select {
			case <-loadDone:
				return
			case <-time.After(ttl / 2):
			}
			signal(syscall.SIGSTOP)
			time.Sleep(3 * ttl)
			signal(syscall.SIGCONT)
		}
	}()

	type job struct{ path, query string }
	var jobs []job
	for range dupes {
		for i := range instances {
			for b := range perInst {
				q := ""
				if b%2 == 1 {
					q = "?accepts_incomplete=true"
				}
				jobs = append(jobs, job{fmt.Sprintf("/v2/service_instances/st-%d/service_bindings/st-%d-%d", i, i, b), q})
			}
		}
	}
	var mu sync.Mutex
	creds := map[string]map[string]any{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := send("PUT", j.path+j.query, harness.BindBody)
			mu.Lock()
			defer mu.Unlock()
			if r.Code != http.StatusOK && r.Code != http.StatusCreated {
				t.Errorf("bind %s: no final answer: %s", j.path, r)
				return
			}
			c := r.Creds()
			if prev, ok := creds[j.path]; ok && (prev["access_key_id"] != c["access_key_id"] || prev["secret_access_key"] != c["secret_access_key"]) {
				t.Errorf("%s answered two different credentials: %v and %v", j.path, prev["access_key_id"], c["access_key_id"])
			}
			creds[j.path] = c
		}()
	}
	wg.Wait()
	close(loadDone)
	<-stallsDone
	if err := <-crashed; err != nil {
		t.Errorf("replica-1: %v", err)
	}
	if t.Failed() {
		return
	}

	// Nothing stays in progress (the dead replica's leases run out and
	// the others finish its work).
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var open int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM records WHERE op_state = 'in progress'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still in progress a minute after the load", open)
		}
	}

	// The backend against the answers.
	keys, err := be.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != instances*perInst {
		t.Errorf("%d users, want %d", len(keys), instances*perInst)
	}
	answered := map[string]bool{}
	for path, c := range creds {
		answered[c["access_key_id"].(string)] = true
		if err := be.Works(c); err != nil {
			t.Errorf("%s: the answered credentials do not work: %v", path, err)
		}
	}
	for user, ks := range keys {
		if len(ks) != 1 || !answered[ks[0]] {
			t.Errorf("user %s has keys %v, want exactly one answered key", user, ks)
		}
	}

	// The metrics of the live replicas.
	var takeovers, retries, lost float64
	for i, b := range replicas {
		if i == 1 {
			continue
		}
		m := scrape(t, b)
		takeovers += m["bucketbroker_lease_takeovers_total"]
		retries += m["bucketbroker_backend_retries_total"]
		lost += m["bucketbroker_leases_lost_total"]
	}
	t.Logf("%d binds (%d bindings) over 3 replicas, %d stalls of %s: %v lease takeovers, %v backend retries, %v leases lost",
		len(jobs), len(creds), stalls, 3*ttl, takeovers, retries, lost)
	if takeovers == 0 {
		t.Error("no replica took over the dead replica's operation")
	}
	if retries == 0 {
		t.Error("no backend call was retried: the stalls did not reach the broker")
	}

	// The leak audit, run as an operator would: the driver and the store
	// of the replicas, none of serve's flags.
	auditor := harness.External(t, binary, be)
	auditor.Env = append(auditor.Env, "BUCKETBROKER_STORE="+dsn)
	if code, out, err := auditor.Audit(); err != nil || code != 0 {
		t.Errorf("leak audit: exit %d %v\n%s", code, err, harness.Tail(out, 3000))
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %s: %v", file, err)
	}
	return pid
}

// scrape reads a broker's /metrics and sums each series over its labels.
func scrape(t *testing.T, b *harness.Broker) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + b.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name, val := line[:i], line[i+1:]
		name, _, _ = strings.Cut(name, "{")
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			m[name] += f
		}
	}
	return m
}
