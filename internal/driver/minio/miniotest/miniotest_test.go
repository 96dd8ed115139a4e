package miniotest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records a skip or a failure and ends the
// calling goroutine, as testing.T does.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fromEnv calls FromEnv on its own goroutine, which a skip or a failure
// ends.
func fromEnv(r *recorder) (s Server) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s = FromEnv(r)
	}()
	<-done
	return s
}

func TestFromEnv(t *testing.T) {
	for name, tc := range map[string]struct {
		reason                string
		env                   map[string]string
		want                  Server
		wantSkip, wantFailure string
	}{
		"None": {
			reason:   "without a server the test skips and says how to start one",
			wantSkip: "hack/minio.sh start",
		},
		"Some": {
			reason:      "a half-set environment is a mistake: the test fails naming what is missing",
			env:         map[string]string{EndpointEnv: "http://127.0.0.1:9000", AccessKeyEnv: "root"},
			wantFailure: SecretKeyEnv + " unset",
		},
		"All": {
			reason: "all three set: the server they name",
			env:    map[string]string{EndpointEnv: "http://127.0.0.1:9000", AccessKeyEnv: "root", SecretKeyEnv: "secret"},
			want:   Server{Endpoint: "http://127.0.0.1:9000", AccessKey: "root", SecretKey: "secret"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{EndpointEnv, AccessKeyEnv, SecretKeyEnv} {
				t.Setenv(n, tc.env[n])
			}
			r := &recorder{TB: t}
			got := fromEnv(r)
			if tc.wantSkip == "" && r.skipped != "" || !strings.Contains(r.skipped, tc.wantSkip) {
				t.Errorf("%s\nskipped with %q, want a skip containing %q", tc.reason, r.skipped, tc.wantSkip)
			}
			if tc.wantFailure == "" && r.failed != "" || !strings.Contains(r.failed, tc.wantFailure) {
				t.Errorf("%s\nfailed with %q, want a failure containing %q", tc.reason, r.failed, tc.wantFailure)
			}
			if got != tc.want {
				t.Errorf("%s\nFromEnv = %+v, want %+v", tc.reason, got, tc.want)
			}
		})
	}
}
