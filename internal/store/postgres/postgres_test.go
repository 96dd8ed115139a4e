package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/storetest"
)

// dsnEnv names the server the tests run against. hack/postgres.sh start
// prints it.
const dsnEnv = "BUCKETBROKER_TEST_POSTGRES_DSN"

// serverDSN returns the DSN of the test server. Without one the test is
// skipped, except in CI, where a store that is never tested against a real
// database must not pass unnoticed.
func serverDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		const how = `eval "$(hack/postgres.sh start /tmp/bucketbroker-postgres)"`
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set and CI=true: the PostgreSQL store must be tested against a real server; start one with %s", dsnEnv, how)
		}
		t.Skipf("%s is not set; start a PostgreSQL server with %s", dsnEnv, how)
	}
	return dsn
}

// dsnWith returns dsn with the given connection settings replaced; "host"
// and "port" replace the address. It handles both DSN forms.
func dsnWith(t testing.TB, dsn string, settings map[string]string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("parse %s: %v", dsnEnv, err)
		}
		q := u.Query()
		host, port := u.Hostname(), u.Port()
		for k, v := range settings {
			switch k {
			case "host":
				host = v
			case "port":
				port = v
			default:
				q.Set(k, v)
			}
		}
		if port != "" {
			u.Host = net.JoinHostPort(host, port)
		} else {
			u.Host = host
		}
		// pgx does not read '+' as a space in a query string; Encode
		// writes a literal '+' as %2B, so every '+' here is a space.
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		return u.String()
	}
	// keyword=value: a later setting overrides an earlier one.
	for k, v := range settings {
		dsn += " " + k + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
	}
	return dsn
}

// connect opens one connection outside any Store. The DSN may hold
// pgxpool's pool_* settings, which a single connection does not accept.
func connect(ctx context.Context, t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsnEnv, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	return conn
}

// admin runs statements on the test server outside any Store.
func admin(t testing.TB, dsn string, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(ctx, t, dsn)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// freshSchema creates an empty schema, dropped when the test ends, and
// returns the DSN of the test server with the schema as its search_path
// and as its application_name (so that its sessions can be found).
func freshSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	base := serverDSN(t)
	schema = "test_" + randomHex(t)
	admin(t, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { admin(t, base, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	return dsnWith(t, base, map[string]string{"search_path": schema, "application_name": schema}), schema
}

func randomHex(t testing.TB) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore(t *testing.T) {
	serverDSN(t) // skip or fail once, not in every test of the suite
	storetest.Run(t, func(t *testing.T) engine.Store {
		dsn, _ := freshSchema(t)
		return open(t, dsn)
	})
}

func record(id string) *engine.Record {
	return &engine.Record{
		Kind:         engine.KindBinding,
		ID:           id,
		InstanceID:   "instance-1",
		Fingerprint:  "fp",
		Phase:        engine.PhaseProvisioning,
		Op:           engine.Operation{ID: "op-1", Type: engine.OpBind, State: engine.OpInProgress},
		SealedSecret: []byte{1, 2, 3},
	}
}

// query returns the first column of every row of sql, as text.
func query(t *testing.T, dsn, sql string, args ...any) []string {
	t.Helper()
	conn := connect(t.Context(), t, dsn)
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// TestTwoReplicas is two broker replicas on one database: two Stores, two
// pools. The primary key and the version column must decide between them
// as they decide between the goroutines of one Store.
func TestTwoReplicas(t *testing.T) {
	dsn, _ := freshSchema(t)
	a, b := open(t, dsn), open(t, dsn)
	storetest.RunTwoStores(t, a, b)
}

// TestConcurrentOpen is replicas starting at the same time on an empty
// database: each migrates or finds the migration done, none fails.
func TestConcurrentOpen(t *testing.T) {
	dsn, schema := freshSchema(t)
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			s, err := Open(t.Context(), dsn)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = s.Close()
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d: %v", i+1, err)
		}
	}

	// Once more, on a migrated schema.
	open(t, dsn)

	want := make([]string, len(migrations))
	for i := range want {
		want[i] = strconv.Itoa(i + 1)
	}
	got := query(t, dsn, `SELECT version::text FROM schema_migrations ORDER BY version`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schema_migrations after %d concurrent Opens and one more (-want +got):\n%s", n, diff)
	}
	// Every statement of a multi-statement migration ran, not only the first.
	indexes := query(t, dsn,
		`SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND tablename = 'records' ORDER BY indexname`, schema)
	if diff := cmp.Diff([]string{"records_instance_id", "records_pkey", "records_resource_name", "records_unfinished"}, indexes); diff != "" {
		t.Errorf("indexes on records (-want +got):\n%s", diff)
	}
}

// TestMigrateFillsResourceName opens a schema at version 1, as versions
// before the listing by name left it, and finds each record's resource
// name filled in by the migration: the listing by name has them in byte
// order, and a row whose data is not an object migrates too (empty
// name) and stays unreadable.
func TestMigrateFillsResourceName(t *testing.T) {
	dsn, _ := freshSchema(t)
	admin(t, dsn, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`)
	admin(t, dsn, migrations[0])
	admin(t, dsn, `INSERT INTO schema_migrations VALUES (1, now())`)
	// The records as versions at schema 1 wrote them: the bucket and the
	// user's name at the top level.
	rows := []struct{ kind, id, instanceID, data string }{
		{"instance", "i1", "", `{"kind":"instance","id":"i1","bucket":"bb-b","phase":"ready"}`},
		{"instance", "i2", "", `{"kind":"instance","id":"i2","bucket":"bb-B","phase":"ready"}`}, // "B" < "b" bytewise, not in a locale
		{"instance", "i3", "", `{"kind":"instance","id":"i3","upstream":"db","phase":"ready"}`},
		{"binding", "b1", "i1", `{"kind":"binding","id":"b1","instanceId":"i1","bucket":"bb-b","userName":"bb-z","phase":"ready"}`},
		{"binding", "b2", "i2", `{"kind":"binding","id":"b2","instanceId":"i2","bucket":"bb-B","userName":"bb-y","phase":"ready"}`},
	}
	for _, r := range rows {
		admin(t, dsn, `INSERT INTO records VALUES ($1, $2, $3, 'ready', 'succeeded', 1, now(), now(), $4)`,
			r.kind, r.id, r.instanceID, r.data)
	}
	admin(t, dsn, `INSERT INTO records VALUES ('instance', 'bad', '', 'ready', 'succeeded', 1, now(), now(), '[1]')`)
	s := open(t, dsn)
	for kind, want := range map[engine.Kind][]string{
		engine.KindInstance: {"instance/bad", "instance/i3", "instance/i2", "instance/i1"},
		engine.KindBinding:  {"binding/b2", "binding/b1"},
	} {
		got, err := s.List(t.Context(), engine.ListOptions{Kind: kind, ByName: true, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		want = slices.DeleteFunc(want, func(k string) bool { return k == "instance/bad" }) // unreadable: skipped
		if diff := cmp.Diff(want, storeKeys(got)); diff != "" {
			t.Errorf("%ss by name after the migration (-want +got):\n%s", kind, diff)
		}
	}
	got := query(t, dsn, `SELECT resource_name FROM records ORDER BY kind, id`)
	if diff := cmp.Diff([]string{"bb-z", "bb-y", "", "bb-b", "bb-B", ""}, got); diff != "" {
		t.Errorf("resource_name of b1, b2, bad, i1, i2, i3 (-want +got):\n%s", diff)
	}
	if bad := s.Unreadable(); len(bad) != 1 || bad[0].ID != "bad" {
		t.Errorf("Unreadable() = %+v, want instance/bad", bad)
	}
}

func storeKeys(rs []*engine.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.Kind)+"/"+r.ID)
	}
	return out
}

func TestOpenRejectsNewerSchema(t *testing.T) {
	dsn, _ := freshSchema(t)
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Insert(t.Context(), record("binding-1")); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	newer := len(migrations) + 1
	admin(t, dsn, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())`, newer)

	s2, err := Open(t.Context(), dsn)
	if err == nil {
		_ = s2.Close()
		t.Fatalf("Open of a database at schema version %d succeeded, want an error", newer)
	}
	want := fmt.Sprintf("database schema version %d is newer than the newest this binary knows (%d)", newer, len(migrations))
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Open error = %q, want it to contain %q", err, want)
	}
}

func TestOpenWithoutSchema(t *testing.T) {
	dsn := dsnWith(t, serverDSN(t), map[string]string{"search_path": "no_such_schema_" + randomHex(t)})
	s, err := Open(t.Context(), dsn)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with a search_path naming no existing schema succeeded, want an error")
	}
	if want := "names no existing schema"; !strings.Contains(err.Error(), want) {
		t.Errorf("Open error = %q, want it to contain %q", err, want)
	}
}

// TestOpenErrorsHidePassword checks that errors from Open, which end up in
// logs, do not carry the password. No server needed.
func TestOpenErrorsHidePassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String() // nothing listens here once l is closed
	_ = l.Close()
	for name, dsn := range map[string]string{
		"Unparsable":    "postgres://bucketbroker:s3cret-pw@" + closed + "/bucketbroker?sslmode=bogus",
		"KeywordValue":  "host=127.0.0.1 password=s3cret-pw sslmode=bogus",
		"ServerRefuses": "postgres://bucketbroker:s3cret-pw@" + closed + "/bucketbroker?sslmode=disable",
	} {
		s, err := Open(t.Context(), dsn)
		if err == nil {
			_ = s.Close()
			t.Fatalf("%s: Open succeeded, want an error", name)
		}
		if strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("%s: Open error shows the password: %v", name, err)
		}
	}
}

func TestRejectsEmptyKey(t *testing.T) {
	dsn, _ := freshSchema(t)
	s := open(t, dsn)
	for name, r := range map[string]*engine.Record{
		"NoKind": {ID: "x"},
		"NoID":   {Kind: engine.KindInstance},
	} {
		if err := s.Insert(t.Context(), r); err == nil || errors.Is(err, engine.ErrExists) {
			t.Errorf("%s: Insert: got error %v, want a validation error", name, err)
		}
		if err := s.Update(t.Context(), r); err == nil || errors.Is(err, engine.ErrNotFound) {
			t.Errorf("%s: Update: got error %v, want a validation error", name, err)
		}
	}
}

func TestSynchronousCommit(t *testing.T) {
	dsn, _ := freshSchema(t)
	tests := map[string]struct {
		reason   string
		settings map[string]string
		want     string
	}{
		"ServerDefault": {
			reason: "The test server commits durably already; nothing to change.",
			want:   "on",
		},
		"Off": {
			reason:   "A session that would not wait for its commit to be durable (here from startup options, as from ALTER ROLE or ALTER DATABASE) must be overridden.",
			settings: map[string]string{"options": "-csynchronous_commit=off"},
			want:     "on",
		},
		"Local": {
			reason:   "local does not wait for synchronous standbys; a failover could lose an answered write.",
			settings: map[string]string{"options": "-csynchronous_commit=local"},
			want:     "on",
		},
		"RemoteApply": {
			reason:   "A stronger setting is kept.",
			settings: map[string]string{"options": "-csynchronous_commit=remote_apply"},
			want:     "remote_apply",
		},
		"ExplicitInDSN": {
			reason:   "synchronous_commit set in the DSN itself is the operator's explicit choice.",
			settings: map[string]string{"synchronous_commit": "off"},
			want:     "off",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := open(t, dsnWith(t, dsn, tc.settings))
			var got string
			if err := s.pool.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s\nsynchronous_commit = %s, want %s", tc.reason, got, tc.want)
			}
		})
	}
}

// TestTerminatedSessions is what a server restart or a failover does to
// the pool: every connection it holds dies. Each dead connection may fail
// one call; after that the pool must have replaced them.
func TestTerminatedSessions(t *testing.T) {
	dsn, schema := freshSchema(t)
	s := open(t, dsn)
	r := record("binding-1")
	if err := s.Insert(t.Context(), r); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	// Open as many connections as the pool holds.
	var wg sync.WaitGroup
	for range s.pool.Config().MaxConns {
		wg.Go(func() { _, _ = s.pool.Exec(t.Context(), `SELECT pg_sleep(0.05)`) })
	}
	wg.Wait()

	killed := query(t, serverDSN(t), `
		SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, schema)
	if len(killed) == 0 {
		t.Fatal("found no session of the store to terminate")
	}

	failed := 0
	for {
		got, err := s.Get(t.Context(), r.Kind, r.ID)
		if err == nil {
			if diff := cmp.Diff(r, got); diff != "" {
				t.Errorf("Get after recovery (-want +got):\n%s", diff)
			}
			break
		}
		if errors.Is(err, engine.ErrNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get on a terminated session: %v, want a connection error", err)
		}
		failed++
		if failed > len(killed) {
			t.Fatalf("Get failed %d times after %d sessions were terminated, last: %v", failed, len(killed), err)
		}
	}
	t.Logf("%d sessions terminated, %d calls failed before the pool recovered", len(killed), failed)
}

// proxy forwards TCP connections to the test server and can play a server
// that is down (connections refused) or one that stopped answering (packets
// dropped), without touching the real server, which other tests share.
type proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	stalled chan struct{} // non-nil while stalled; closed to resume
	done    chan struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	go p.serve(ln)
	t.Cleanup(func() {
		p.down()
		close(p.done)
	})
	return p
}

func (p *proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go p.pump(server, client)
	go p.pump(client, server)
}

// pump copies src to dst, holding what it read while the proxy is stalled.
func (p *proxy) pump(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if stalled != nil {
				select {
				case <-stalled:
				case <-p.done:
					return
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down closes the listener and every connection: a server that is down.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// up listens again on the same address.
func (p *proxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go p.serve(ln)
}

// stall stops forwarding: calls on open connections, and new connections,
// hang as if the server's host had vanished.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// isStoreFailure reports whether err is what the engine turns into OSB 503:
// an error that is neither a store sentinel nor the caller's context.
func isStoreFailure(err error) bool {
	for _, not := range []error{engine.ErrExists, engine.ErrNotFound, engine.ErrStale, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, not) {
			return false
		}
	}
	return err != nil
}

// TestServerUnavailable checks that a store whose server is down or silent
// never hangs: a refused connection fails at once, a silent server fails
// the call when its context ends, and both recover when the server is back.
func TestServerUnavailable(t *testing.T) {
	dsn, _ := freshSchema(t)
	u, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(int(u.Port))))
	host, port, _ := net.SplitHostPort(p.addr)
	s := open(t, dsnWith(t, dsn, map[string]string{"host": host, "port": port}))
	stored := record("binding-1")
	if err := s.Insert(t.Context(), stored); err != nil {
		t.Fatalf("Insert: %v", err)
	}

	t.Run("Down", func(t *testing.T) {
		p.down()
		defer p.up(t)
		for name, call := range map[string]func(ctx context.Context) error{
			"Get": func(ctx context.Context) error {
				_, err := s.Get(ctx, stored.Kind, stored.ID)
				return err
			},
			"Insert": func(ctx context.Context) error {
				r := record("binding-2")
				want := r.Clone()
				err := s.Insert(ctx, r)
				if diff := cmp.Diff(want, r); diff != "" {
					t.Errorf("failed Insert changed the caller's record (-want +got):\n%s", diff)
				}
				return err
			},
			"Update": func(ctx context.Context) error {
				r := stored.Clone()
				r.Phase = engine.PhaseReady
				want := r.Clone()
				err := s.Update(ctx, r)
				if diff := cmp.Diff(want, r); diff != "" {
					t.Errorf("failed Update changed the caller's record (-want +got):\n%s", diff)
				}
				return err
			},
			"List": func(ctx context.Context) error {
				_, err := s.List(ctx, engine.ListOptions{})
				return err
			},
		} {
			// A long deadline: the call must fail on its own, long before.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			start := time.Now()
			err := call(ctx)
			cancel()
			// Each dead pooled connection may fail one call before the
			// pool dials again and is refused; either way, an error.
			if !isStoreFailure(err) {
				t.Errorf("%s while the server is down: got error %v, want a connection error", name, err)
			}
			t.Logf("%s while the server is down: %v", name, err)
			if d := time.Since(start); d > defaultConnectTimeout {
				t.Errorf("%s while the server is down took %v, want well under %v", name, d, defaultConnectTimeout)
			}
		}
	})

	t.Run("Silent", func(t *testing.T) {
		// A call on a connection that was fine a moment ago: the query is
		// sent, and no answer comes.
		if _, err := s.Get(t.Context(), stored.Kind, stored.ID); err != nil {
			t.Fatalf("Get before the server fell silent: %v", err)
		}
		p.stall()
		defer p.resume()
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.Get(ctx, stored.Kind, stored.ID)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get on a silent server: got error %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Get on a silent server returned after %v, want soon after its 300ms deadline", d)
		}
	})

	t.Run("SilentWithoutDeadline", func(t *testing.T) {
		// A new connection to a silent server fails after the default
		// connect timeout even when the caller set no deadline.
		p.stall()
		defer p.resume()
		start := time.Now()
		s2, err := Open(context.Background(), dsnWith(t, dsn, map[string]string{"host": host, "port": port}))
		if err == nil {
			_ = s2.Close()
			t.Fatal("Open on a silent server succeeded")
		}
		if !isStoreFailure(err) {
			t.Errorf("Open on a silent server: got error %v, want a connection error", err)
		}
		if d := time.Since(start); d < defaultConnectTimeout || d > 2*defaultConnectTimeout {
			t.Errorf("Open on a silent server returned after %v, want after the connect timeout (%v)", d, defaultConnectTimeout)
		}
	})

	t.Run("Recovers", func(t *testing.T) {
		// Down ended with up, Silent with resume. A dead connection left in
		// the pool may fail one call.
		var err error
		for range int(s.pool.Config().MaxConns) + 1 {
			var got *engine.Record
			if got, err = s.Get(t.Context(), stored.Kind, stored.ID); err == nil {
				if diff := cmp.Diff(stored, got); diff != "" {
					t.Errorf("Get after the server came back (-want +got):\n%s", diff)
				}
				break
			}
		}
		if err != nil {
			t.Fatalf("Get after the server came back: %v", err)
		}
		r := record("binding-2")
		if err := s.Insert(t.Context(), r); err != nil {
			t.Errorf("Insert after the server came back: %v", err)
		}
	})
}

func BenchmarkInsertGet(b *testing.B) {
	dsn, _ := freshSchema(b)
	storetest.Bench(b, open(b, dsn))
}

func TestUnreadableRecords(t *testing.T) {
	serverDSN(t)
	storetest.RunUnreadable(t, func(t *testing.T) (store.RawStore, storetest.Planter) {
		dsn, _ := freshSchema(t)
		s := open(t, dsn)
		return s, func(t *testing.T, raw store.Raw, state engine.OpState) {
			admin(t, dsn, `INSERT INTO records (kind, id, instance_id, phase, op_state, version, created_at, updated_at, data)
				VALUES ($1, $2, $3, 'provisioning', $4, $5, now(), now(), $6)`,
				string(raw.Kind), raw.ID, raw.InstanceID, string(state), raw.Version, string(raw.Data))
		}
	})
}
