package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresDSNEnv names the test PostgreSQL server (hack/with-test-servers.sh
// sets it).
const PostgresDSNEnv = "BUCKETBROKER_TEST_POSTGRES_DSN"

// PostgresSchema makes an empty schema on the test PostgreSQL server and
// returns a DSN whose search_path is that schema, so that tests never see
// each other's rows. Without a server the test is skipped, or fails when
// CI is "true": CI must never silently skip the real database.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(PostgresDSNEnv)
	if dsn == "" {
		msg := PostgresDSNEnv + " is not set: run through hack/with-test-servers.sh (make test)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Postgres is a PostgreSQL server of one test's own, made and run by
// hack/postgres.sh in a temporary folder, so that the test may stop it,
// start it again or freeze it without disturbing other packages' tests,
// which share the server of hack/with-test-servers.sh. It needs what that
// server needs (PostgreSQL installed, or root to install it), and is
// skipped or fails as PostgresSchema is when the test servers are not
// running.
type Postgres struct {
	t    testing.TB
	path string // of hack/postgres.sh
	dir  string
	// DSN reaches the server's bucketbroker database; Start keeps it.
	DSN string

	mu     sync.Mutex
	frozen []int // the processes Freeze stopped, the postmaster first
}

// NewPostgres makes and starts a server of the test's own; it is thawed,
// stopped and removed when the test ends.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	if os.Getenv(PostgresDSNEnv) == "" {
		PostgresSchema(t) // skips, or fails in CI, and says why
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Short: the server's unix socket lives in it. Open to all: the server
	// runs as its own user and must reach its folder.
	base, err := os.MkdirTemp("/tmp", "bb-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Postgres{t: t, path: filepath.Join(root, "hack", "postgres.sh"), dir: filepath.Join(base, "pg")}
	t.Cleanup(func() {
		p.Thaw()
		p.run("stop")
		_ = os.RemoveAll(base)
	})
	out := p.run("start")
	p.DSN = strings.Trim(strings.TrimPrefix(strings.TrimSpace(out), "export "+PostgresDSNEnv+"="), "'")
	if _, err := url.Parse(p.DSN); err != nil || !strings.HasPrefix(p.DSN, "postgres://") {
		t.Fatalf("hack/postgres.sh start printed %q, want an export of a postgres:// DSN", out)
	}
	return p
}

// Stop stops the server (a fast shutdown: sessions are ended, clients see
// their connections closed).
func (p *Postgres) Stop() { p.run("stop") }

// Start starts the stopped server again on the same address.
func (p *Postgres) Start() {
	u, err := url.Parse(p.DSN)
	if err != nil {
		p.t.Fatal(err)
	}
	p.run("start", "PG_PORT="+u.Port())
}

// Freeze stops every process of the server with SIGSTOP: the postmaster
// first, so that it forks no new one, then each of its children. The
// kernel still accepts connections and acknowledges what clients send, but
// nothing answers: a server that hangs, or a network partition, as a
// client sees it (no RST, no FIN), which no stopped server shows.
func (p *Postgres) Freeze() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		return
	}
	pid, err := p.postmaster()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		p.t.Fatalf("freeze postmaster %d: %v", pid, err)
	}
	p.frozen = []int{pid}
	children, err := childrenOf(pid)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, c := range children {
		if err := syscall.Kill(c, syscall.SIGSTOP); err == nil {
			p.frozen = append(p.frozen, c)
		}
	}
}

// Thaw resumes the processes Freeze stopped, children first; it does
// nothing when the server is not frozen.
func (p *Postgres) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.frozen) - 1; i >= 0; i-- {
		_ = syscall.Kill(p.frozen[i], syscall.SIGCONT)
	}
	p.frozen = nil
}

// SQL runs one statement on the server as its superuser (hack/postgres.sh
// sql) and returns what it prints.
func (p *Postgres) SQL(stmt string) string {
	p.t.Helper()
	return p.script(nil, "sql", p.dir, stmt)
}

// MoveTo moves the bucketbroker database, its tables and their indexes, to
// a tablespace in dir (a folder of its own, such as a SmallDisk), while
// the server's write-ahead log stays where it is: as a data volume apart
// from the log's. No session may be open on the database.
func (p *Postgres) MoveTo(dir string) {
	p.t.Helper()
	// The server's user must own the tablespace's folder and reach it.
	fi, err := os.Stat(filepath.Join(p.dir, "data"))
	if err != nil {
		p.t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	loc := filepath.Join(dir, "tablespace")
	// dir may be in a t.TempDir, whose folders only their owner may
	// enter: open dir and the one above it to the server's user.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := os.Mkdir(loc, 0o700); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Chown(loc, int(st.Uid), int(st.Gid)); err != nil {
		p.t.Fatal(err)
	}
	p.SQL("CREATE TABLESPACE moved LOCATION '" + loc + "'")
	p.SQL("ALTER DATABASE bucketbroker SET TABLESPACE moved")
}

func (p *Postgres) run(verb string, env ...string) string {
	p.t.Helper()
	return p.script(env, verb, p.dir)
}

// script runs hack/postgres.sh with args, and env added to this process's
// environment, and returns its stdout; the test fails with its stderr.
func (p *Postgres) script(env []string, args ...string) string {
	p.t.Helper()
	cmd := exec.Command(p.path, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.t.Fatalf("hack/postgres.sh %q: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// postmaster returns the pid on the first line of the server's
// postmaster.pid.
func (p *Postgres) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("find the postmaster: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("find the postmaster: postmaster.pid starts with %q", first)
	}
	return pid, nil
}

// childrenOf returns the processes whose parent is pid, from /proc.
func childrenOf(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out, nil
}

// RepoRoot is the folder holding go.mod, found from the working directory
// up: a test runs in its package's folder.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find the repository: no go.mod above the working directory")
		}
		dir = parent
	}
}
