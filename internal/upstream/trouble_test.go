package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// timeoutError is a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestTroubleIsDescribedByTheUpstreamsName(t *testing.T) {
	refused := &url.Error{Op: "Put", URL: "http://127.0.0.1:3201/v2/service_instances/i1",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: syscall.ECONNREFUSED.Error(), Addr: "127.0.0.1:3201"}}}
	conflict := &osbclient.Error{Method: "PUT", Path: "/v2/service_instances/i1", Status: 409, Description: "name taken"}
	var syntax *json.SyntaxError
	_ = json.Unmarshal([]byte("<html>"), &syntax)
	cases := map[string]struct {
		reason string
		err    error
		want   string // "": not trouble, the error reaches the platform as it is
	}{
		"connection refused": {
			reason: "the issue's case: the transport error names an address and a syscall",
			err:    fmt.Errorf("PUT /v2/service_instances/i1: %w", refused),
			want:   "upstream ill is unreachable",
		},
		"timeout": {
			reason: "a transport timeout is told apart",
			err:    fmt.Errorf("GET x: %w", &url.Error{Op: "Get", URL: "http://127.0.0.1:1/x", Err: timeoutError{}}),
			want:   "upstream ill did not answer in time",
		},
		"deadline": {
			reason: "the call's deadline",
			err:    fmt.Errorf("GET x: %w", context.DeadlineExceeded),
			want:   "upstream ill did not answer in time",
		},
		"5xx": {
			reason: "a 5xx's body may hold the upstream's internals",
			err:    &osbclient.Error{Method: "PUT", Path: "/v2/service_instances/i1", Status: 503, Description: "at db.internal:5432"},
			want:   "upstream ill failed: it answered 503 Service Unavailable",
		},
		"unreadable answer": {
			reason: "a 200 that is not JSON",
			err:    fmt.Errorf("PUT x: decode answer 200: %w", errors.Join(syntax)),
			want:   "upstream ill gave an answer that cannot be read",
		},
		"too large": {
			reason: "an answer over the limit",
			err:    fmt.Errorf("PUT x: answer 200: %w", osbclient.ErrResponseTooLarge),
			want:   "upstream ill gave an answer that cannot be read",
		},
		"409 and a look that got no answer": {
			reason: "trouble anywhere in the error's tree is described",
			err:    fmt.Errorf("%w (and a look at the instance failed: %w)", conflict, refused),
			want:   "upstream ill is unreachable",
		},
		"409": {
			reason: "a 4xx is the upstream's decision in its own words",
			err:    conflict,
		},
		"refusal": {
			reason: "a refusal reaches the platform as the upstream said it",
			err:    classify(&osbclient.Error{Status: 400, Description: "bad plan"}),
		},
	}
	u := &Upstream{cfg: Config{Name: "ill"}}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := u.troubled(tc.err)
			var d engine.Described
			got := ""
			if errors.As(err, &d) {
				got = d.Description()
				if d.Error() != tc.err.Error() {
					t.Errorf("Error() = %q, want the whole account %q", d.Error(), tc.err.Error())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("description (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("the described error no longer wraps %v", tc.err)
			}
		})
	}
}
