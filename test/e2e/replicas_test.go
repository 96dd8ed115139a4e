package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// external names the shared servers replicas need: PostgreSQL and an S3 +
// IAM endpoint (hack/with-test-servers.sh starts both).
type external struct {
	dsn, s3, iam, ak, sk string
}

func externalServers(t *testing.T) external {
	e := external{os.Getenv("BUCKETBROKER_TEST_POSTGRES_DSN"), os.Getenv("BUCKETBROKER_TEST_S3_ENDPOINT"),
		os.Getenv("BUCKETBROKER_TEST_IAM_ENDPOINT"), os.Getenv("BUCKETBROKER_TEST_S3_ACCESS_KEY"), os.Getenv("BUCKETBROKER_TEST_S3_SECRET_KEY")}
	if e.dsn == "" || e.s3 == "" || e.iam == "" || e.ak == "" || e.sk == "" {
		msg := "needs PostgreSQL and an S3 + IAM server: run through hack/with-test-servers.sh (make test)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return e
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type replica struct {
	name, api string
	cmd       *exec.Cmd
	log       *harness.LockedBuffer
	done      chan struct{}
}

// TestReplicasExactlyOnce runs three replicas on one PostgreSQL database and
// one S3 + IAM server, sends 500 duplicate provisions then 500 duplicate
// binds round-robin over them, kills one replica in the middle of a bind
// (between the backend creating a key and the record knowing it), and checks: one bucket per instance, one live key per binding, the same
// credentials in every successful answer, no operation left in progress.
func TestReplicasExactlyOnce(t *testing.T) {
	ext := externalServers(t)
	dsn := harness.PostgresSchema(t)
	prefix := "r" + randomHex(3)
	keyFile := filepath.Join(t.TempDir(), "encryption.key")

	var dead atomic.Int32
	dead.Store(-1)
	var replicas []*replica
	for i := range 3 {
		r := &replica{name: fmt.Sprintf("replica-%d", i), api: harness.FreeAddr(t), log: &harness.LockedBuffer{}, done: make(chan struct{})}
		r.cmd = exec.Command(binary, "serve", "--driver", "s3iam", "--s3-endpoint", ext.s3, "--iam-endpoint", ext.iam,
			"--path-style", "--listen", r.api, "--data-dir", t.TempDir(), "--encryption-key-file", keyFile,
			"--name-prefix", prefix, "--replica-id", r.name, "--lease-ttl", "3s", "--log-format", "text")
		r.cmd.Env = append(os.Environ(), "BUCKETBROKER_USERNAME="+user, "BUCKETBROKER_PASSWORD="+pass, "BUCKETBROKER_STORE="+dsn,
			"BUCKETBROKER_S3_ROOT_ACCESS_KEY="+ext.ak, "BUCKETBROKER_S3_ROOT_SECRET_KEY="+ext.sk)
		if i == 1 {
			// replica-1 dies (exit 137, as under kill -9) at the worst
			// moment of the first bind it drives: the key exists on the
			// backend and no record knows it.
			r.cmd.Env = append(r.cmd.Env, "BUCKETBROKER_CRASH_AT=bind/key-created")
		}
		r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
		if i > 0 {
			time.Sleep(200 * time.Millisecond) // the first creates the key file
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = r.cmd.Wait()
			if i == 1 {
				dead.Store(1) // the load balancer notices
			}
			close(r.done)
		}()
		replicas = append(replicas, r)
	}
	t.Cleanup(func() {
		for _, r := range replicas {
			_ = r.cmd.Process.Kill()
			<-r.done
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", r.name, harness.Tail(r.log.String(), 3000))
			}
		}
	})
	for _, r := range replicas {
		waitHealthy(t, r)
	}

	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var rr atomic.Int64
	// send is a platform behind a load balancer: round-robin over live
	// replicas; a connection error or a 5xx is retried on the next one.
	send := func(method, path string, body any) (int, map[string]any) {
		data, _ := json.Marshal(body)
		for attempt := 0; attempt < 20; attempt++ {
			i := int(rr.Add(1) % 3)
			if int(dead.Load()) == i {
				continue
			}
			req, _ := http.NewRequest(method, "http://"+replicas[i].api+path, bytes.NewReader(data))
			req.SetBasicAuth(user, pass)
			req.Header.Set("X-Broker-API-Version", "2.17")
			resp, err := client.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			out := map[string]any{}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = json.Unmarshal(b, &out)
			if resp.StatusCode >= 500 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return resp.StatusCode, out
		}
		return 0, nil
	}

	const instances, dupes = 10, 50
	type job struct {
		path string
		body any
	}
	run := func(jobs []job) [][2]any {
		results := make([][2]any, len(jobs))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i, j := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				code, body := send("PUT", j.path, j.body)
				results[i] = [2]any{code, body}
			}()
		}
		wg.Wait()
		return results
	}

	var provisions []job
	for range dupes {
		for i := range instances {
			provisions = append(provisions, job{fmt.Sprintf("/v2/service_instances/inst-%d", i), provisionBody})
		}
	}
	for i, r := range run(provisions) {
		if code := r[0].(int); code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("provision %d (%s): %d %v", i, provisions[i].path, code, r[1])
		}
	}

	var binds []job
	for range dupes / 5 {
		for i := range instances {
			for b := range 5 {
				binds = append(binds, job{fmt.Sprintf("/v2/service_instances/inst-%d/service_bindings/bind-%d-%d", i, i, b), bindBody})
			}
		}
	}
	creds := map[string]string{}
	for i, r := range run(binds) {
		code, body := r[0].(int), r[1].(map[string]any)
		if code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("bind %d (%s): %d %v", i, binds[i].path, code, body)
		}
		c, _ := body["credentials"].(map[string]any)
		got := fmt.Sprint(c["access_key_id"], "/", c["secret_access_key"])
		if prev, ok := creds[binds[i].path]; ok && prev != got {
			t.Fatalf("%s answered two different credentials", binds[i].path)
		}
		creds[binds[i].path] = got
	}

	// The backend: one bucket per instance, one user with one key per binding.
	ctx := context.Background()
	s3c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(ext.s3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ext.ak, ext.sk, "")})
	out, err := s3c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	buckets := 0
	for _, b := range out.Buckets {
		if strings.HasPrefix(aws.ToString(b.Name), prefix+"-") {
			buckets++
		}
	}
	if buckets != instances {
		t.Errorf("buckets = %d, want %d", buckets, instances)
	}
	ic := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(ext.iam),
		Credentials: credentials.NewStaticCredentialsProvider(ext.ak, ext.sk, "")})
	users, err := ic.ListUsers(ctx, &iam.ListUsersInput{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, u := range users.Users {
		if !strings.HasPrefix(aws.ToString(u.UserName), prefix+"-") {
			continue
		}
		n++
		keys, err := ic.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: u.UserName})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys.AccessKeyMetadata) != 1 {
			t.Errorf("user %s has %d keys, want 1", aws.ToString(u.UserName), len(keys.AccessKeyMetadata))
		}
	}
	if n != instances*5 {
		t.Errorf("users = %d, want %d", n, instances*5)
	}

	// No operation stays in progress (the dead replica's lease expires and
	// a live one finishes its work).
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var open int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM records WHERE op_state = 'in progress'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still in progress 30s after the load", open)
		}
		time.Sleep(200 * time.Millisecond)
	}

	takeovers := 0
	for _, r := range replicas {
		takeovers += strings.Count(r.log.String(), "previous_lease=replica-1")
	}
	select {
	case <-replicas[1].done:
	default:
		t.Fatal("replica-1 never reached its crash point")
	}
	if takeovers == 0 {
		t.Error("no replica took over the dead replica's operation")
	}
	t.Logf("operations of the dead replica taken over by the others: %d", takeovers)

	// Clean up the shared backend for the next run.
	for i := range instances {
		for b := range 5 {
			send("DELETE", fmt.Sprintf("/v2/service_instances/inst-%d/service_bindings/bind-%d-%d%s", i, i, b, deleteQuery), nil)
		}
		send("DELETE", fmt.Sprintf("/v2/service_instances/inst-%d%s", i, deleteQuery), nil)
	}
}

func waitHealthy(t *testing.T, r *replica) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + r.api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-r.done:
			t.Fatalf("%s exited at start:\n%s", r.name, r.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("%s not ready in 30s:\n%s", r.name, r.log)
}
