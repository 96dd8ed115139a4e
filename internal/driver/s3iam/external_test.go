package s3iam

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/pkg/driver/drivertest"
)

// The S3 + IAM server TestConformanceExternal runs against, named by the
// environment exactly as `hack/versitygw.sh start DIR` prints it. The test
// uses nothing of the embedded server that TestMain starts for the other
// tests: the two runs prove the driver on two deployments of the server.
const (
	envS3Endpoint  = "BUCKETBROKER_TEST_S3_ENDPOINT"
	envIAMEndpoint = "BUCKETBROKER_TEST_IAM_ENDPOINT"
	envAccessKey   = "BUCKETBROKER_TEST_S3_ACCESS_KEY"
	envSecretKey   = "BUCKETBROKER_TEST_S3_SECRET_KEY"
)

// serverEnv names the variables that point a test at one S3 + IAM server
// process, as the script that starts it prints them.
type serverEnv struct {
	s3Endpoint, iamEndpoint, accessKey, secretKey string
	// script starts the server: "hack/versitygw.sh".
	script string
	// leftOut, if set, says why an optional server was left out ("" if
	// it was not): in CI such a server is then skipped, not failed.
	leftOut func() string
}

var versitygwEnv = serverEnv{
	s3Endpoint: envS3Endpoint, iamEndpoint: envIAMEndpoint, accessKey: envAccessKey, secretKey: envSecretKey,
	script: "hack/versitygw.sh",
}

// externalConfig is the driver configuration for the external server, with
// the server's root keys as the driver's own. With no variable set it skips
// the test, except in CI, where a real server that silently went missing
// must fail the run.
func externalConfig(t *testing.T) Config {
	t.Helper()
	return envConfig(t, versitygwEnv)
}

// envConfig is the driver configuration for the server env names. With no
// variable set it skips the test, except in CI, where a real server that
// silently went missing fails the run unless env.leftOut says why it was
// left out.
func envConfig(t *testing.T, env serverEnv) Config {
	t.Helper()
	names := []string{env.s3Endpoint, env.iamEndpoint, env.accessKey, env.secretKey}
	vals := map[string]string{}
	var set, missing []string
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			vals[n] = v
			set = append(set, n)
		} else {
			missing = append(missing, n)
		}
	}
	ci := os.Getenv("CI") == "true"
	leftOut := ""
	if len(missing) == len(names) && ci && env.leftOut != nil {
		leftOut = env.leftOut()
	}
	switch {
	case leftOut != "":
		t.Skipf("optional server left out: %s", leftOut)
	case len(missing) == len(names) && ci:
		t.Fatalf("CI=true and %s are unset: CI must run against a real server process; "+
			`start one with eval "$(%s start DIR)"`, strings.Join(names, ", "), env.script)
	case len(missing) == len(names):
		t.Skipf(`no server process: run eval "$(%s start /tmp/DIR)" to set %s`,
			env.script, strings.Join(names, ", "))
	case len(missing) > 0:
		t.Fatalf("%s set but %s unset: set all four (%s start prints them)",
			strings.Join(set, ", "), strings.Join(missing, ", "), env.script)
	}
	return Config{
		S3Endpoint:      vals[env.s3Endpoint],
		IAMEndpoint:     vals[env.iamEndpoint],
		Region:          "us-east-1",
		PathStyle:       true,
		AccessKeyID:     vals[env.accessKey],
		SecretAccessKey: vals[env.secretKey],
	}
}

func TestConformanceExternal(t *testing.T) {
	cfg := externalConfig(t)
	d := usableDriver(t, cfg)

	t.Run("Suite", func(t *testing.T) {
		drivertest.Run(t, suiteConfig(d, cfg, "bbext"))
	})
	t.Run("HealthErrors", func(t *testing.T) {
		testHealthErrors(t, cfg)
	})
}

// usableDriver is a driver for cfg's server, checked to answer: a stopped
// server or stale variables fail here once, with the cause, instead of in
// every subtest.
func usableDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := d.Observe(ctx, driver.ObserveRequest{}); err != nil {
		t.Fatalf("external server %s (IAM %s) is not usable: %v", cfg.S3Endpoint, cfg.IAMEndpoint, err)
	}
	return d
}

// testHealthErrors checks that Observe names the failing endpoint and the
// cause an operator can act on, for cfg's server.
func testHealthErrors(t *testing.T, cfg Config) {
	dead := closedPort(t)
	tests := map[string]struct {
		reason string
		modify func(*Config)
		// want lists the messages of the EndpointErrors, in order.
		want []string
	}{
		"WrongSecret": {
			reason: "a wrong secret must be named as rejected credentials on both endpoints",
			modify: func(c *Config) { c.SecretAccessKey = "wrong" + c.SecretAccessKey },
			want: []string{
				"S3 endpoint " + cfg.S3Endpoint + ": credentials rejected (SignatureDoesNotMatch)",
				"IAM endpoint " + cfg.IAMEndpoint + ": credentials rejected (SignatureDoesNotMatch)",
			},
		},
		"UnknownKey": {
			reason: "an unknown key must be named as rejected credentials on both endpoints",
			modify: func(c *Config) { c.AccessKeyID = "AKIANOBODY" + randomHex(4) },
			want: []string{
				"S3 endpoint " + cfg.S3Endpoint + ": credentials rejected (InvalidAccessKeyId)",
				"IAM endpoint " + cfg.IAMEndpoint + ": credentials rejected (InvalidClientTokenId)",
			},
		},
		"S3Unreachable": {
			reason: "a closed S3 port must be named as refused, and IAM still checked",
			modify: func(c *Config) { c.S3Endpoint = dead },
			want:   []string{"S3 endpoint " + dead + ": connection refused"},
		},
		"IAMUnreachable": {
			reason: "a closed IAM port must be named as refused",
			modify: func(c *Config) { c.IAMEndpoint = dead },
			want:   []string{"IAM endpoint " + dead + ": connection refused"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := cfg
			tc.modify(&c)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			_, err := newDriver(t, c).Observe(ctx, driver.ObserveRequest{})
			var got []string
			for _, e := range unjoin(err) {
				var epErr *EndpointError
				if !errors.As(e, &epErr) {
					t.Fatalf("%s\nObserve error %v is not an *EndpointError", tc.reason, e)
				}
				got = append(got, epErr.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("%s\nObserve errors:\n%s\nwant:\n%s", tc.reason, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if err != nil && strings.Contains(err.Error(), cfg.SecretAccessKey) {
				t.Errorf("Observe error contains the secret key")
			}
		})
	}
}
