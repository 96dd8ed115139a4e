package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/broker"
)

func run(args ...string) (string, error) {
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestServeHelpExplainsCredentials(t *testing.T) {
	out, err := run("serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BUCKETBROKER_PASSWORD", "BUCKETBROKER_S3_ROOT_ACCESS_KEY", "--data-dir", "--driver", "--catalog", "--encryption-key-file",
		"--upstream", "--upstream-config", "--bucket-service", "BUCKETBROKER_UPSTREAM_<NAME>_PASSWORD", "passwordFile"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help does not mention %s", want)
		}
	}
}

func TestServeRejectsBadFlagsBeforeStarting(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad log level":                     {[]string{"serve", "--log-level", "loud"}, nil, "--log-level"},
		"bad log format":                    {[]string{"serve", "--log-format", "xml"}, nil, "--log-format"},
		"s3iam without keys":                {[]string{"serve", "--driver", "s3iam"}, map[string]string{"BUCKETBROKER_S3_ROOT_ACCESS_KEY": "", "BUCKETBROKER_S3_ROOT_SECRET_KEY": ""}, "BUCKETBROKER_S3_ROOT_ACCESS_KEY"},
		"stray argument":                    {[]string{"serve", "extra"}, nil, "unknown command"},
		"unknown flag":                      {[]string{"serve", "--nope"}, nil, "unknown flag"},
		"call timeout as long as the lease": {[]string{"serve", "--lease-ttl", "10s", "--backend-call-timeout", "10s"}, nil, "--backend-call-timeout"},
		"negative call timeout":             {[]string{"serve", "--backend-call-timeout", "-1s"}, nil, "--backend-call-timeout"},
		"no lease":                          {[]string{"serve", "--lease-ttl", "0s"}, nil, "--lease-ttl"},
		"sync budget past the sync timeout": {[]string{"serve", "--sync-budget", "60s"}, nil, "--sync-budget"},
		"negative sync budget":              {[]string{"serve", "--sync-budget", "-1s"}, nil, "--sync-budget"},
		"no workers":                        {[]string{"serve", "--workers", "0"}, nil, "--workers"},
		"TLS certificate without key":       {[]string{"serve", "--tls-cert-file", "tls.crt"}, nil, "--tls-key-file"},
		"TLS key without certificate":       {[]string{"serve", "--tls-key-file", "tls.key"}, nil, "--tls-cert-file"},
		"no service at all":                 {[]string{"serve", "--bucket-service=false"}, nil, "--bucket-service=false needs"},
		"upstream without a URL":            {[]string{"serve", "--upstream", "db"}, nil, "NAME=URL"},
		"two upstreams of one name":         {[]string{"serve", "--upstream", "db=http://a", "--upstream", "db=http://b"}, nil, `two upstreams are named "db"`},
		"missing upstream config":           {[]string{"serve", "--upstream-config", "/nonexistent/upstreams.yaml"}, nil, "read upstream config"},
		"no poll interval":                  {[]string{"serve", "--upstream", "db=http://a", "--upstream-poll-interval", "0s"}, nil, "--upstream-poll-interval"},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := run(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestBannerKeepsSecretsOffLogs: where standard output is not a terminal
// (a pod's log), the banner names the files that keep generated secrets,
// and shows none of them; on a terminal it shows them.
func TestBannerKeepsSecretsOffLogs(t *testing.T) {
	b := &broker.Broker{URL: "http://127.0.0.1:8080", Username: "broker", Password: "generated-password-123",
		RootAccessKey: "BBROOTACCESSKEY", RootSecretKey: "generated-root-secret-456",
		Generated: broker.Generated{BrokerCredentials: true, PasswordFile: "/data/broker-password",
			RootCredentials: true, RootCredentialsFile: "/data/s3-root-credentials.json"}}
	secrets := []string{b.Password, b.RootAccessKey, b.RootSecretKey}
	for name, tc := range map[string]struct {
		terminal    bool
		wantSecrets bool
	}{
		"log":      {terminal: false, wantSecrets: false},
		"terminal": {terminal: true, wantSecrets: true},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			printBanner(&out, b, tc.terminal)
			for _, s := range secrets {
				if strings.Contains(out.String(), s) != tc.wantSecrets {
					t.Errorf("banner shows %q: %v, want %v:\n%s", s, !tc.wantSecrets, tc.wantSecrets, out.String())
				}
			}
			for _, f := range []string{"/data/broker-password", "/data/s3-root-credentials.json"} {
				if !strings.Contains(out.String(), f) {
					t.Errorf("banner does not say %s keeps a generated secret:\n%s", f, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	printBanner(&out, &broker.Broker{Username: "u", Password: "chosen-password"}, true)
	if strings.Contains(out.String(), "chosen-password") {
		t.Errorf("banner shows a password the operator chose:\n%s", out.String())
	}
}

func TestVersion(t *testing.T) {
	out, err := run("version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "bucketbroker ") || !strings.Contains(out, "commit ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version printed %q, want the version, the commit and %s", out, runtime.Version())
	}
}
