package main

import (
	"bytes"
	"strings"
	"testing"
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
	for _, want := range []string{"BUCKETBROKER_PASSWORD", "BUCKETBROKER_S3_ROOT_ACCESS_KEY", "--data-dir", "--driver", "--catalog", "--encryption-key-file"} {
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
