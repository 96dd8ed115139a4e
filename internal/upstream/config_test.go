package upstream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	pw := writeFile(t, "pw", "s3cret\n")
	t.Setenv("DB_BROKER_PASSWORD", "from-env")
	p := writeFile(t, "upstreams.yaml", `
upstreams:
- name: db
  url: https://db.internal
  username: admin
  passwordFile: `+pw+`
  tls: {caFile: /etc/ca.pem, serverName: db}
  services: [mysql]
  plans: [small]
  timeout: 30s
- name: queue
  url: http://queue.internal
  passwordEnv: DB_BROKER_PASSWORD
`)
	cfgs, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 2 {
		t.Fatalf("%d upstreams", len(cfgs))
	}
	db, q := cfgs[0], cfgs[1]
	if db.Name != "db" || db.Client.URL != "https://db.internal" || db.Client.Username != "admin" || db.Client.Password != "s3cret" ||
		db.Client.TLS.CAFile != "/etc/ca.pem" || db.Client.TLS.ServerName != "db" || db.Services[0] != "mysql" || db.Plans[0] != "small" ||
		db.Client.Timeout.String() != "30s" {
		t.Errorf("db: %+v", db)
	}
	if q.Client.Password != "from-env" {
		t.Errorf("queue's password from the environment: %q", q.Client.Password)
	}
}

func TestLoadFileRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"no upstreams":   {"upstreams: []", "no upstreams"},
		"unknown field":  {"upstreams: [{name: a, url: http://a, password: x}]", "unknown field"},
		"no url":         {"upstreams: [{name: a}]", "url is required"},
		"two passwords":  {"upstreams: [{name: a, url: http://a, passwordFile: f, passwordEnv: E}]", "give one"},
		"unset env":      {"upstreams: [{name: a, url: http://a, passwordEnv: BUCKETBROKER_TEST_UNSET}]", "is not set"},
		"missing file":   {"upstreams: [{name: a, url: http://a, passwordFile: /nonexistent/pw}]", "read passwordFile"},
		"bad timeout":    {"upstreams: [{name: a, url: http://a, timeout: soon}]", "timeout"},
		"not a document": {"upstreams: {", "upstream config"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadFile(writeFile(t, "u.yaml", tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestParseFlagTakesCredentialsFromTheEnvironment(t *testing.T) {
	t.Setenv("BUCKETBROKER_UPSTREAM_MY_DB_USERNAME", "u")
	t.Setenv("BUCKETBROKER_UPSTREAM_MY_DB_PASSWORD", "p")
	c, err := ParseFlag("my-db=http://db:8080")
	if err != nil || c.Name != "my-db" || c.Client.URL != "http://db:8080" || c.Client.Username != "u" || c.Client.Password != "p" {
		t.Fatalf("%+v, %v", c, err)
	}
	for _, bad := range []string{"db", "=http://x", "db="} {
		if _, err := ParseFlag(bad); err == nil {
			t.Errorf("ParseFlag(%q) accepted", bad)
		}
	}
	if _, err := New(Config{Name: "Bad_Name", Client: c.Client}); err == nil {
		t.Error("New accepted an upper-case name")
	}
	c.Client.URL = "http://user:pw@db"
	if _, err := New(Config{Name: "db", Client: c.Client}); err == nil || strings.Contains(err.Error(), "pw@") {
		t.Errorf("a URL with user info: %v", err)
	}
}
